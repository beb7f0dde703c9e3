"""The TLS of webhook POSTs: which CA the servers are verified against, and the client
certificate sent to a server that asks for one (mutual TLS).

Four settings (``SIDECAR_WEBHOOK_TLS_*``) name PEM files, as Kubernetes mounts a Secret.
Unset, https webhooks are verified against certifi's public bundle and no client
certificate is sent (``webhook_http.default_tls``). Set, the CA file *replaces* the public
bundle (as librdkafka's ``ssl.ca.location`` and curl's ``--cacert`` do): a private CA.

The files are read at start (a missing or unreadable file, or one that is not what its
setting says, is one ``InvalidSettings`` line naming the setting: exit 2) and again when
one of them changes (a renewed certificate: cert-manager and Strimzi replace the files
behind the Secret volume's symlink). Each new connection asks ``WebhookTLS.context()``,
which looks at the files' identity (inode, size, modification time) and rebuilds the
context when it changed. A rotation caught half way (the new certificate, the old key)
keeps the previous context, with one warning, until the files agree again. Connections
already open keep the context they were made with.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import certifi
import structlog

from sidecar.settings import ENV_PREFIX, InvalidSettings, Settings

log = structlog.get_logger("sidecar.webhook_tls")

CA_VARIABLE = f"{ENV_PREFIX}WEBHOOK_TLS_CA_LOCATION"
CERTIFICATE_VARIABLE = f"{ENV_PREFIX}WEBHOOK_TLS_CERTIFICATE_LOCATION"
KEY_VARIABLE = f"{ENV_PREFIX}WEBHOOK_TLS_KEY_LOCATION"
PASSWORD_VARIABLE = f"{ENV_PREFIX}WEBHOOK_TLS_KEY_PASSWORD"

_Stamp = tuple[int, int, int, int] | None  # (device, inode, size, mtime_ns); None: absent


@dataclass(frozen=True, slots=True)
class TLSFiles:
    """What the four settings name."""

    ca: Path | None = None
    certificate: Path | None = None
    key: Path | None = None
    password: str | None = field(default=None, repr=False)  # never shown

    @classmethod
    def from_settings(cls, settings: Settings) -> TLSFiles:
        password = settings.webhook_tls_key_password
        return cls(
            settings.webhook_tls_ca_location,
            settings.webhook_tls_certificate_location,
            settings.webhook_tls_key_location,
            password.get_secret_value() if password is not None else None,
        )

    @property
    def configured(self) -> bool:
        return any(value is not None for value in (self.ca, self.certificate, self.key))

    def stamps(self) -> tuple[_Stamp, ...]:
        return tuple(_stamp(path) for path in (self.ca, self.certificate, self.key))


def build_context(files: TLSFiles) -> ssl.SSLContext:
    """The client context the files make; ``InvalidSettings`` (one line, naming the
    setting, never the password) when they cannot make one."""
    if files.key is not None and files.certificate is None:
        raise InvalidSettings(
            f"{KEY_VARIABLE} is set without {CERTIFICATE_VARIABLE}: a key needs its certificate"
        )
    if files.password is not None and files.certificate is None:
        raise InvalidSettings(
            f"{PASSWORD_VARIABLE} is set without {CERTIFICATE_VARIABLE}: nothing to decrypt"
        )
    # Either context verifies the host name and the chain (CERT_REQUIRED).
    if files.ca is not None:
        pem = _read(files.ca, CA_VARIABLE)
        try:
            context = ssl.create_default_context(cadata=pem.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
            raise InvalidSettings(
                f"{CA_VARIABLE}={files.ca}: not a PEM CA certificate ({_reason(exc)})"
            ) from None
    else:
        context = ssl.create_default_context(cafile=certifi.where())
    if files.certificate is not None:
        _load_client_certificate(context, files)
    return context


def _load_client_certificate(context: ssl.SSLContext, files: TLSFiles) -> None:
    assert files.certificate is not None
    certificate = _read(files.certificate, CERTIFICATE_VARIABLE)
    if b"-----BEGIN CERTIFICATE-----" not in certificate:
        raise InvalidSettings(
            f"{CERTIFICATE_VARIABLE}={files.certificate}: no PEM certificate in it"
        )
    if files.key is not None:
        key = _read(files.key, KEY_VARIABLE)
        where = f"{KEY_VARIABLE}={files.key}"
    else:
        key = certificate
        where = f"{CERTIFICATE_VARIABLE}={files.certificate} (no {KEY_VARIABLE})"
    if b"PRIVATE KEY-----" not in key:
        raise InvalidSettings(f"{where}: no PEM private key in it")
    encrypted = b"ENCRYPTED" in key
    if encrypted and files.password is None:
        raise InvalidSettings(f"{where}: the key is encrypted; set {PASSWORD_VARIABLE}")
    try:
        context.load_cert_chain(
            str(files.certificate),
            str(files.key) if files.key is not None else None,
            password=lambda: files.password or "",  # never a prompt on the terminal
        )
    except ssl.SSLError as exc:
        reason = _reason(exc)
        if "KEY_VALUES_MISMATCH" in reason.upper():
            raise InvalidSettings(
                f"{where}: the key does not belong to {CERTIFICATE_VARIABLE}={files.certificate}"
            ) from None
        if encrypted:
            raise InvalidSettings(
                f"{where}: cannot decrypt the key with {PASSWORD_VARIABLE} ({reason})"
            ) from None
        raise InvalidSettings(
            f"{CERTIFICATE_VARIABLE}={files.certificate} or {where}: {reason}"
        ) from None
    except OSError as exc:  # replaced between the read above and this one
        raise InvalidSettings(f"{where}: {exc.strerror or exc}") from None


class WebhookTLS:
    """The webhook client's TLS context, rebuilt when its files change. Loop-side only."""

    def __init__(self, files: TLSFiles) -> None:
        self._files = files
        self._stamps = files.stamps()
        self._context = build_context(files)  # InvalidSettings: the start-up check
        self._refused: tuple[_Stamp, ...] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookTLS | None:
        """``None`` when no file is set (the client's default context then)."""
        files = TLSFiles.from_settings(settings)
        if not files.configured:
            if files.password is not None:
                build_context(files)  # refuses a password with nothing to decrypt
            return None
        return cls(files)

    def context(self) -> ssl.SSLContext:
        """The context for a new connection: rebuilt first if a file changed since."""
        stamps = self._files.stamps()
        if stamps == self._stamps or stamps == self._refused:
            return self._context
        try:
            context = build_context(self._files)
        except InvalidSettings as exc:
            self._refused = stamps
            log.warning(
                "webhook TLS files changed but cannot be used; keeping the previous ones",
                error=str(exc),
            )
            return self._context
        self._context, self._stamps, self._refused = context, stamps, None
        log.info("webhook TLS files changed; reloaded them")
        return self._context


def _read(path: Path, variable: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidSettings(f"{variable}={path}: {exc.strerror or exc}") from None


def _stamp(path: Path | None) -> _Stamp:
    if path is None:
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _reason(exc: Exception) -> str:
    """One line: OpenSSL's reason, without the library's bracketed location noise."""
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return " ".join(str(exc).split()) or type(exc).__name__
