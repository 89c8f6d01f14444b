"""Who may use the dashboard, and proof that a form came from it: the auth hook, HTTP basic
auth for the CLI server, the CSRF token and the same-origin check."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import re
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException
from starlette.requests import Request

Auth = Callable[[Request], "str | Awaitable[str | None] | None"]
"""Returns the signed-in user's name, or None (401); may raise `HTTPException` itself."""

CSRF_COOKIE = "proletarian_dashboard_csrf"
CSRF_FIELD = "csrf_token"
_NONCE = re.compile(r"[A-Za-z0-9_-]{32,64}")


def basic_auth(user: str, password: str, *, realm: str = "proletarian-di dashboard") -> Auth:
    """An auth hook for one user with a password over HTTP basic auth (compared in constant
    time); a wrong or missing one gets 401 with a challenge, so that a browser asks for it."""
    if not user or not password:
        raise ValueError("basic_auth needs a user name and a password")
    expected = (user.encode(), password.encode())
    challenge = {"WWW-Authenticate": f'Basic realm="{realm}", charset="UTF-8"'}

    def check(request: Request) -> str:
        given = _credentials(request.headers.get("authorization", ""))
        same_user = secrets.compare_digest(given[0], expected[0])
        same_password = secrets.compare_digest(given[1], expected[1])
        if same_user and same_password:
            return user
        raise HTTPException(401, "sign in: this dashboard needs a user and password", challenge)

    return check


def _credentials(header: str) -> tuple[bytes, bytes]:
    """The user and password of a basic `Authorization` header (empty when there are none)."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return b"", b""
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return b"", b""
    user, _, password = decoded.partition(b":")
    return user, password


async def authenticated(auth: Auth | None, request: Request) -> str | None:
    """The user the hook names (None without a hook); 401 when the hook names nobody."""
    if auth is None:
        return None
    user = auth(request)
    if inspect.isawaitable(user):
        user = await user
    if not user:
        raise HTTPException(401, "sign in: this dashboard needs an authenticated user")
    return str(user)


class Signer:
    """Signs with a random secret of this app: the CSRF tokens (a signed double submit: the
    cookie holds a random nonce, each form its HMAC with the user) and the flash messages."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def _mac(self, *parts: str) -> str:
        message = "\0".join(parts).encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    @staticmethod
    def nonce(request: Request) -> tuple[str, bool]:
        """The browser's CSRF nonce from its cookie, or a new one (True: set the cookie)."""
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if _NONCE.fullmatch(nonce):
            return nonce, False
        return secrets.token_urlsafe(32), True

    def csrf_token(self, nonce: str, user: str | None) -> str:
        """The token the forms carry for this nonce and user."""
        return self._mac("csrf", user or "", nonce)

    def csrf_valid(self, request: Request, user: str | None, token: object) -> bool:
        """Whether a form's token matches the cookie's nonce and the user."""
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if not isinstance(token, str) or not _NONCE.fullmatch(nonce):
            return False
        return hmac.compare_digest(self.csrf_token(nonce, user), token)

    def sign(self, text: str) -> str:
        """`text` with its signature, for a cookie (ASCII-safe)."""
        encoded = base64.urlsafe_b64encode(text.encode()).decode()
        return f"{encoded}.{self._mac('flash', encoded)}"

    def unsign(self, value: str) -> str | None:
        """The text `sign` signed, or None when the value was not signed here."""
        encoded, _, mac = value.rpartition(".")
        if not encoded or not hmac.compare_digest(self._mac("flash", encoded), mac):
            return None
        return base64.urlsafe_b64decode(encoded).decode(errors="replace")


def same_origin(request: Request) -> bool:
    """False when the browser says the request comes from another site (`Sec-Fetch-Site`,
    or an `Origin` naming another host); True when it says nothing (not a browser)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin != "null" and urlsplit(origin).netloc.lower() == host.lower()
