"""Certificates made with openssl for a test: a private CA, a server certificate for
127.0.0.1 and a client certificate (mutual TLS), each as PEM files."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


def _openssl(*args: str | Path, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test certificates")
    subprocess.run(
        ["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=60
    )


@dataclass(frozen=True)
class Authority:
    """A CA: ``cert`` and ``key`` PEM files under ``directory``."""

    name: str
    directory: Path

    @property
    def cert(self) -> Path:
        return self.directory / f"{self.name}.crt"

    @property
    def key(self) -> Path:
        return self.directory / f"{self.name}.key"

    def issue(self, name: str, *, server: bool, password: str | None = None) -> tuple[Path, Path]:
        """A certificate signed by this CA, and its key (encrypted when ``password``):
        for 127.0.0.1 (``server``), else a client one."""
        d = self.directory
        key, csr, cert, ext = (
            d / f"{name}.key",
            d / f"{name}.csr",
            d / f"{name}.crt",
            d / f"{name}.ext",
        )
        ext.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
            if server
            else "extendedKeyUsage=clientAuth\n"
        )
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-out", key, cwd=d)  # fmt: skip
        _openssl("req", "-new", "-key", key, "-subj", f"/CN={name}", "-out", csr, cwd=d)
        _openssl("x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key,
                 "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", cert, cwd=d)  # fmt: skip
        if password is not None:
            encrypted = d / f"{name}.enc.key"
            _openssl("pkcs8", "-topk8", "-in", key, "-out", encrypted, "-v2", "aes-256-cbc",
                     "-passout", f"pass:{password}", cwd=d)  # fmt: skip
            return cert, encrypted
        return cert, key

    def server_context(self, *, client_ca: Authority | None = None) -> ssl.SSLContext:
        """A server context with a certificate of this CA for 127.0.0.1; requiring a client
        certificate of ``client_ca`` when given (mutual TLS)."""
        cert, key = self.issue(f"{self.name}-server", server=True)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        if client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=client_ca.cert)
        return context


def authority(directory: Path, name: str) -> Authority:
    """A new self-signed CA named ``name`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = Authority(name, directory)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", ca.key, "-out", ca.cert, "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)  # fmt: skip
    return ca
