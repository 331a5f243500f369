"""HTTP for the wheel cache's transports: one client, TLS through envbuilder.tls, every failure typed.

A connection that cannot be made (refused, no route, DNS, timeout, a TLS certificate no CA vouches
for) or a server error is `WheelCacheUnreachableError`; a 401/403 after credentials were offered
is `WheelCacheAuthError`. Any other status comes back to the transport, which knows what a 404
means for it (a miss) and what a 400 on an upload means (a refused publish).

Authentication follows the registry protocol: an unauthenticated request is answered 401 with a
`WWW-Authenticate` challenge, either `Basic realm=…` (htpasswd) or `Bearer realm=…,service=…,scope=…`
(a token server, which is asked for a token with the credentials). The answer is kept for the
client's later requests, so uploads are never sent twice. Credentials and tokens are sent with
`add_unredirected_header`: a redirect to blob storage never carries them.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from envbuilder.errors import WheelCacheAuthError, WheelCacheUnreachableError
from envbuilder.kernels.wheelcache.auth import Credentials, credentials_for
from envbuilder.tls import ssl_context

USER_AGENT = "envbuilder-wheel-cache"
TIMEOUT = 60.0
#: a registry's JSON answers (manifests, tokens) are small; anything larger is refused unread
MAX_JSON_BYTES = 4 << 20


@dataclass
class Response:
    status: int
    headers: Any        # email.message.Message
    body: IO[bytes]

    def read(self, limit: int = MAX_JSON_BYTES) -> bytes:
        data = self.body.read(limit + 1)
        if len(data) > limit:
            raise WheelCacheUnreachableError(f"an answer of more than {limit >> 20} MiB where a small one was "
                                             "expected", "check that the URL names a wheel cache")
        return data


class _NoRaise(urllib.request.HTTPErrorProcessor):
    """Every status comes back as a response; the caller decides what it means."""

    def http_response(self, request: urllib.request.Request, response: Any) -> Any:
        return response

    https_response = http_response


_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """'Bearer realm="https://auth/token",service="reg",scope="repository:a:pull"' -> ("bearer", {...})."""
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), dict(_CHALLENGE.findall(params))


class HttpClient:
    """Requests to one server (`origin`, e.g. https://registry:5000), with its authentication kept."""

    def __init__(self, origin: str, ca_bundle: Any = None, what: str = "the wheel cache",
                 timeout: float = TIMEOUT) -> None:
        self.origin = origin.rstrip("/")
        self.host = urllib.parse.urlsplit(self.origin).netloc
        self.what = what
        self.timeout = timeout
        self.ca_bundle = ca_bundle
        handlers: list[Any] = [_NoRaise()]
        if self.origin.startswith("https://"):
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context(ca_bundle)))
        self._opener = urllib.request.build_opener(*handlers)
        self.authorization: str | None = None
        self._credentials: Credentials | None = None
        self._looked_up = False

    # --- requests ------------------------------------------------------------------------------------------

    def request(self, method: str, url: str, *, headers: dict[str, str] | None = None, data: Any = None,
                timeout: float | None = None) -> Response:
        """One request; the response whatever its status. Unreachable/TLS/5xx raise typed errors."""
        full = url if "://" in url else self.origin + url
        req = urllib.request.Request(full, data=data, method=method, headers={"User-Agent": USER_AGENT,
                                                                              **(headers or {})})
        if self.authorization:
            req.add_unredirected_header("Authorization", self.authorization)
        try:
            raw = self._opener.open(req, timeout=timeout or self.timeout)
        except urllib.error.URLError as exc:
            raise self.unreachable(exc.reason) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self.unreachable(exc) from exc
        resp = Response(int(raw.status), raw.headers, raw)
        if resp.status >= 500:
            detail = error_text(resp)
            raise WheelCacheUnreachableError(f"{self.what} at {self.host} answered HTTP {resp.status} to {method} "
                                             f"{urllib.parse.urlsplit(full).path}{detail}",
                                             "the server is failing: try again later, or check its logs")
        return resp

    @contextlib.contextmanager
    def stream(self, method: str, url: str, **kw: Any) -> Iterator[Response]:
        resp = self.request(method, url, **kw)
        try:
            yield resp
        finally:
            resp.body.close()

    def unreachable(self, reason: object) -> WheelCacheUnreachableError:
        if isinstance(reason, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(reason):
            why = getattr(reason, "verify_message", None) or _short(reason)
            return WheelCacheUnreachableError(
                f"{self.what} at {self.host}: its TLS certificate is not trusted ({why})",
                "pass --ca-bundle with the CA that issued it (or set SSL_CERT_FILE)")
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return WheelCacheUnreachableError(f"{self.what} at {self.host} did not answer within "
                                              f"{self.timeout:.0f} s", "check the host, port and network")
        return WheelCacheUnreachableError(f"{self.what} at {self.host} cannot be reached ({_short(reason)})",
                                          "check the URL, that the server runs, and the network/proxy")

    # --- authentication ------------------------------------------------------------------------------------

    def credentials(self) -> Credentials | None:
        if not self._looked_up:
            self._credentials = credentials_for(self.host)
            self._looked_up = True
        return self._credentials

    def answer_challenge(self, resp: Response, scope: str) -> None:
        """Set `authorization` from a 401's challenge (Basic or Bearer), or raise WheelCacheAuthError."""
        header = resp.headers.get("WWW-Authenticate", "")
        scheme, params = parse_challenge(header)
        creds = self.credentials()
        if scheme == "basic":
            if creds is None:
                raise self.needs_credentials()
            self.authorization = creds.basic()
            return
        if scheme == "bearer" and params.get("realm"):
            self.authorization = "Bearer " + self._token(params, scope, creds)
            return
        raise WheelCacheAuthError(f"{self.what} at {self.host} asks for {scheme or 'an unknown'} authentication, "
                                  "which envbuilder does not speak", "use a registry with basic or token auth")

    def _token(self, params: dict[str, str], scope: str, creds: Credentials | None) -> str:
        import json

        query = {"service": params.get("service", "")} if params.get("service") else {}
        query["scope"] = params.get("scope") or scope
        realm = params["realm"]
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        token_client = HttpClient(f"{urllib.parse.urlsplit(realm).scheme}://{urllib.parse.urlsplit(realm).netloc}",
                                  self.ca_bundle, f"the token server of {self.host}", self.timeout)
        if creds is not None:
            token_client.authorization = creds.basic()
        with token_client.stream("GET", url) as resp:
            if resp.status in (401, 403):
                raise self.refused(resp.status, creds)
            if resp.status != 200:
                raise WheelCacheAuthError(f"the token server of {self.host} answered HTTP {resp.status}",
                                          "check the registry's token service")
            try:
                answer = json.loads(resp.read())
                token = answer.get("token") or answer.get("access_token")
            except (ValueError, AttributeError):
                token = None
        if not isinstance(token, str) or not token:
            raise WheelCacheAuthError(f"the token server of {self.host} returned no token",
                                      "check the registry's token service")
        return token

    def needs_credentials(self) -> WheelCacheAuthError:
        return WheelCacheAuthError(f"{self.what} at {self.host} asks for credentials and none are set",
                                   f"run `docker login {self.host}`, or set ENVBUILDER_REGISTRY_USER and "
                                   "ENVBUILDER_REGISTRY_PASSWORD")

    def refused(self, status: int, creds: Credentials | None = None) -> WheelCacheAuthError:
        creds = creds if creds is not None else self.credentials()
        if creds is None:
            return self.needs_credentials()
        return WheelCacheAuthError(f"{self.what} at {self.host} refused the credentials of {creds.username!r} "
                                   f"from {creds.source} (HTTP {status})",
                                   f"check the user, password and its rights on the repository; `docker login "
                                   f"{self.host}` to renew them")


def _short(reason: object) -> str:
    text = str(getattr(reason, "reason", None) or reason or type(reason).__name__)
    return text.splitlines()[0][:200] if text else type(reason).__name__


def error_text(resp: Response) -> str:
    """': <the registry's error message>' from an OCI error body, or ''."""
    import json

    try:
        errors = json.loads(resp.body.read(65536)).get("errors") or []
        msg = "; ".join(str(e.get("message") or e.get("code")) for e in errors if isinstance(e, dict))
    except (ValueError, AttributeError, OSError, http.client.HTTPException):
        return ""
    return f": {msg[:200]}" if msg else ""

