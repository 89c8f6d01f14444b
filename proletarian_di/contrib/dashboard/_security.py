"""Who may use the dashboard, and proof that a form came from it: the auth hook, HTTP basic
auth for the CLI server, the CSRF token and the same-origin check."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import inspect
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Literal, get_args
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException
from starlette.requests import Request

Role = Literal["viewer", "operator"]
"""What a user may do: a viewer sees every page and changes nothing, an operator acts."""
ROLES: tuple[Role, ...] = get_args(Role)


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who signed in and their role, as an auth hook may return it (`Identity("ann",
    "viewer")`); a hook that returns a plain name makes that user an operator."""

    user: str
    role: Role = "operator"

    def __post_init__(self) -> None:
        if not isinstance(self.user, str) or not self.user:
            raise ValueError(f"Identity needs a user name, got {self.user!r}")
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {self.role!r}")

    @property
    def operator(self) -> bool:
        """Whether this user may act (when the dashboard's actions are on)."""
        return self.role == "operator"


Auth = Callable[[Request], "str | Identity | Awaitable[str | Identity | None] | None"]
"""Returns the signed-in user's name (an operator) or `Identity`, or None (401); may raise
`HTTPException` itself."""

CSRF_COOKIE = "proletarian_dashboard_csrf"
CSRF_FIELD = "csrf_token"
_NONCE = re.compile(r"[A-Za-z0-9_-]{32,64}")


def basic_auth(
    user: str, password: str, *, realm: str = "proletarian-di dashboard", role: Role = "operator"
) -> Auth:
    """An auth hook for one user with a password over HTTP basic auth (compared in constant
    time), signed in with `role`; a wrong or missing one gets 401 with a challenge, so that a
    browser asks for it."""
    if not user or not password:
        raise ValueError("basic_auth needs a user name and a password")
    identity = Identity(user, role)
    expected = (user.encode(), password.encode())
    challenge = {"WWW-Authenticate": f'Basic realm="{realm}", charset="UTF-8"'}

    def check(request: Request) -> Identity:
        given = _credentials(request.headers.get("authorization", ""))
        same_user = secrets.compare_digest(given[0], expected[0])
        same_password = secrets.compare_digest(given[1], expected[1])
        if same_user and same_password:
            return identity
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


async def authenticated(auth: Auth | None, request: Request) -> Identity | None:
    """Who the hook names (None without a hook), a plain name as an operator; 401 when the
    hook names nobody. A hook that returns anything else is a bug of the application: a
    `TypeError` (a 500, the page telling nothing of it)."""
    if auth is None:
        return None
    found = auth(request)
    if inspect.isawaitable(found):
        found = await found
    if not found:
        raise HTTPException(401, "sign in: this dashboard needs an authenticated user")
    if isinstance(found, Identity):
        return found
    if isinstance(found, str):
        return Identity(found)
    raise TypeError(
        f"the dashboard's auth hook must return a user name, an Identity or None, got {found!r}"
    )


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
