"""``SIDECAR_<X>_FILE``: a secret-bearing setting read from a file.

The Kubernetes Secret-volume convention (and Docker's secrets): instead of a password in
an environment value, where ``kubectl describe``, ``/proc/<pid>/environ`` and crash
reports show it, the file that holds it: ``SIDECAR_KAFKA_SASL_PASSWORD_FILE=
/etc/kafka-secret/password``. The file's content, one trailing line break removed, is the
value of ``SIDECAR_<X>``, for exactly the settings that carry a secret:

* the sidecar's own secrets (``SIDECAR_API_TOKEN``, ``SIDECAR_DRAIN_TOKEN``,
  ``SIDECAR_WEBHOOK_TLS_KEY_PASSWORD``) and ``SIDECAR_WEBHOOKS`` (its entries hold the
  webhook secrets);
* the librdkafka pass-through properties that do: passwords (``sasl.password``,
  ``ssl.key.password``, ``ssl.keystore.password``), ``sasl.oauthbearer.client.secret``,
  ``ssl.key.pem`` and ``sasl.oauthbearer.config``.

Certificate, key and CA *locations* are file paths already (``SIDECAR_KAFKA_SSL_CA_LOCATION``
and the rest): librdkafka reads those files itself.

Both ``SIDECAR_<X>`` and ``SIDECAR_<X>_FILE`` set, a file that cannot be read, or a
``_FILE`` variable for a setting that is no secret: one ``InvalidSettings`` line naming the
variable (the CLI's exit 2). The content is never part of a message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from sidecar.kafka.properties import ENV_PREFIX, KAFKA_ENV_PREFIX, kafka_property_name

SUFFIX = "_FILE"

#: The sidecar's own settings that carry a secret.
SECRET_SETTINGS = frozenset({"API_TOKEN", "DRAIN_TOKEN", "WEBHOOK_TLS_KEY_PASSWORD", "WEBHOOKS"})

#: librdkafka properties (the pass-through) that carry a secret.
_SECRET_PROPERTY = re.compile(
    r"(^|\.)(password|secret)$|^sasl\.oauthbearer\.client\.secret$|^ssl\.key\.pem$"
    r"|^sasl\.oauthbearer\.config$"
)

#: Variables that end in ``_FILE`` and are settings of their own, not this convention.
_NOT_SECRET_FILES = frozenset({"SIDECAR_CONFIG_FILE", "SIDECAR_ENV_FILE"})

# A secret larger than this is not one (a log, /dev/zero by mistake).
MAX_SECRET_BYTES = 64 * 1024


class SecretFileError(ValueError):
    """One line naming the variable; ``sidecar.cli`` turns it into ``InvalidSettings``."""


def is_secret_variable(variable: str) -> bool:
    """Whether ``SIDECAR_<X>`` (upper case) carries a secret, so ``SIDECAR_<X>_FILE`` may
    name a file that holds it."""
    if variable.startswith(KAFKA_ENV_PREFIX):
        return bool(_SECRET_PROPERTY.search(kafka_property_name(variable)))
    return variable.removeprefix(ENV_PREFIX) in SECRET_SETTINGS


def file_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """``{SIDECAR_<X>_FILE: SIDECAR_<X>}`` for every ``_FILE`` variable of the convention."""
    found = {}
    for key in environ:
        name = key.upper()
        if not name.startswith(ENV_PREFIX) or not name.endswith(SUFFIX):
            continue
        if name in _NOT_SECRET_FILES:
            continue
        found[key] = name.removesuffix(SUFFIX)
    return found


def resolve(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with every ``SIDECAR_<X>_FILE`` replaced by ``SIDECAR_<X>`` and the
    file's content. Raise ``SecretFileError`` (one line) when that cannot be done."""
    resolved = dict(environ)
    present = {key.upper() for key, value in environ.items()}
    for file_variable, target in sorted(file_variables(environ).items()):
        if not is_secret_variable(target):
            raise SecretFileError(
                f"{file_variable}: {target} is not a secret setting; only secrets are read "
                "from files (set it directly)"
            )
        if target in present:
            raise SecretFileError(
                f"{target} and {file_variable} are both set: set one of them, not both"
            )
        path = Path(environ[file_variable])
        del resolved[file_variable]
        resolved[target] = read_secret(path, file_variable)
    return resolved


def read_secret(path: Path, variable: str) -> str:
    """The secret in ``path`` (one trailing line break removed); ``SecretFileError`` names
    ``variable`` when it cannot be read, is empty, too large or not UTF-8 text."""
    if not str(path).strip():
        raise SecretFileError(f"{variable}: is empty; name the file that holds the secret")
    try:
        if path.is_dir():
            raise SecretFileError(f"{variable}: {path} is a directory, not a file")
        with path.open("rb") as file:
            data = file.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise SecretFileError(
            f"{variable}: cannot read {path}: {exc.strerror or type(exc).__name__}"
        ) from None
    if len(data) > MAX_SECRET_BYTES:
        raise SecretFileError(f"{variable}: {path} is larger than 64 KiB: not a secret")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretFileError(f"{variable}: {path} is not UTF-8 text") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text.strip():
        raise SecretFileError(f"{variable}: {path} is empty")
    return text
