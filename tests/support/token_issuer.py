"""A small OAuth 2 token issuer for the OAUTHBEARER tests, over HTTP on 127.0.0.1.

It serves what a broker and a client of an identity provider use:

* ``GET /jwks``: the JSON Web Key Set Kafka's ``OAuthBearerValidatorCallbackHandler``
  checks token signatures with (``sasl.oauthbearer.jwks.endpoint.url``);
* ``POST /token``: the client-credentials grant librdkafka's ``sasl.oauthbearer.method=oidc``
  calls (``sasl.oauthbearer.token.endpoint.url``), the client authenticated with HTTP Basic
  (or ``client_id``/``client_secret`` in the form). It answers an RS256 JWT with ``sub``
  (the client id), ``aud`` ``kafka``, ``iat``, ``exp`` and ``scope``.

One RSA key per issuer, made at start; ``tokens_issued`` and ``refused`` count requests.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

AUDIENCE = "kafka"
TOKEN_SECONDS = 300


class TokenIssuer:
    def __init__(self, client_id: str, client_secret: str) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.key_id = secrets.token_hex(8)
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.tokens_issued = 0
        self.refused = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def jwks_url(self) -> str:
        return f"{self.base_url}/jwks"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/token"

    def start(self) -> TokenIssuer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def jwks(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
        public.update({"kid": self.key_id, "use": "sig", "alg": "RS256"})
        return {"keys": [public]}

    def token(self, subject: str, scope: str) -> str:
        now = int(time.time())
        claims = {
            "iss": self.base_url,
            "sub": subject,
            "aud": AUDIENCE,
            "iat": now,
            "nbf": now,
            "exp": now + TOKEN_SECONDS,
            "scope": scope,
        }
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self.key_id})

    def grant(self, headers: Any, body: str) -> tuple[int, dict[str, Any]]:
        """The client-credentials grant: (status, JSON body)."""
        form = dict(urllib.parse.parse_qsl(body))
        client_id, secret = form.get("client_id"), form.get("client_secret")
        auth = headers.get("Authorization") or ""
        if auth.lower().startswith("basic "):
            try:
                decoded = base64.b64decode(auth[6:].strip()).decode()
            except ValueError:
                decoded = ":"
            client_id, _, secret = decoded.partition(":")
            client_id, secret = urllib.parse.unquote(client_id), urllib.parse.unquote(secret)
        if form.get("grant_type") != "client_credentials":
            self.refused += 1
            return 400, {"error": "unsupported_grant_type"}
        if client_id != self.client_id or not secrets.compare_digest(
            (secret or "").encode(), self.client_secret.encode()
        ):
            self.refused += 1
            return 401, {"error": "invalid_client"}
        self.tokens_issued += 1
        scope = form.get("scope") or "kafka"
        return 200, {
            "access_token": self.token(client_id, scope),
            "token_type": "bearer",
            "expires_in": TOKEN_SECONDS,
            "scope": scope,
        }


def _handler(issuer: TokenIssuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/jwks":
                self._answer(200, issuer.jwks())
            else:
                self._answer(404, {"error": "not_found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8", "replace")
            if self.path.split("?")[0] != "/token":
                self._answer(404, {"error": "not_found"})
                return
            self._answer(*issuer.grant(self.headers, body))

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: the tests read the counters

    return Handler


@contextmanager
def issuing(client_id: str, client_secret: str) -> Iterator[TokenIssuer]:
    issuer = TokenIssuer(client_id, client_secret).start()
    try:
        yield issuer
    finally:
        issuer.stop()
