"""Database URLs and libpq conninfo strings without their passwords: split, mask, check, scrub.

One rule keeps every output safe: in a URL the user info ends at the LAST '@'
after `scheme://`, so an unencoded '#', '/', '?', '@' or ':' in a password is
still inside it. Masking may hide more than the password (an '@' in a query
parameter moves the cut), never less. `passwords()` gives every form of the
passwords a string holds, `scrub()` takes them (and any URL or `password=`
value) out of a message, and `postgres_problem()` refuses, before libpq sees
it, a conninfo that libpq would reject or cut elsewhere than `mask()` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

from ..errors import DatabaseURLError

MASK = "***"
HINT = (
    "if the password has special characters, percent-encode them "
    "(% as %25, @ as %40, / as %2F, # as %23, ? as %3F, : as %3A)"
)

_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.\-]*)://")
_URL_PARAM = re.compile(r"[?&]([^?&=]*)=")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://\S*")
_PASSWORD_WORD = re.compile(r"(?:password|passwd|pwd)\s*=?[ \t\n\r\f\v]*", re.IGNORECASE)
_PASSWORD_IN_TEXT = re.compile(
    r"(\w*(?:password|passwd|pwd)\s*=\s*)"
    r"('(?:[^'\\]|\\[\s\S])*(?:'|\\?\Z)|\"(?:[^\"\\]|\\[\s\S])*(?:\"|\\?\Z)|\S+)",
    re.IGNORECASE,
)
_PIECE_DELIMITERS = re.compile(r"[\s/?#@:&=%'\"\\;,]+")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_LIBPQ_SPACE = " \t\n\r\f\v"
_LIBPQ_USERINFO_END = re.compile(r"[@/]")
_KEYWORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LIBPQ_STATIC_QUOTES = ('"="', '"]"', '":"', '"/"')
_MYSQL_SCHEMES = ("mysql", "mysql+pymysql", "mariadb")


@dataclasses.dataclass(frozen=True)
class URLParts:
    """A URL cut where a password could end: the user info runs to the last '@'.

    `user` and `password` are raw (still percent-encoded); `password` is None
    when the user info has no ':'; `rest` is host, port, path, query, fragment.
    """

    scheme: str
    start: int
    at: int
    user: str | None
    password: str | None
    rest: str

    @property
    def password_span(self) -> tuple[int, int] | None:
        """Where the raw password sits in the URL, for masking."""
        if self.user is None or self.password is None:
            return None
        return (self.start + len(self.user) + 1, self.at)


def split_url(text: str) -> URLParts | None:
    """`scheme://[user[:password]@]rest` cut at the last '@'; None for a string with no `://`."""
    match = _SCHEME.match(text)
    if not match:
        return None
    start = match.end()
    at = text.rfind("@", start)
    if at < 0:
        return URLParts(match.group(1), start, -1, None, None, text[start:])
    user, colon, password = text[start:at].partition(":")
    return URLParts(match.group(1), start, at, user, password if colon else None, text[at + 1 :])


def libpq_url(url: str) -> str:
    """The URL with its scheme spelt `postgresql`, the one spelling libpq reads as a URL."""
    parts = split_url(url)
    return "postgresql://" + url[parts.start :] if parts else url


def decoded(raw: str) -> str | None:
    """`raw` percent-decoded, or None when its escapes are malformed or not UTF-8."""
    if _BAD_ESCAPE.search(raw):
        return None
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return None


def _secret_key(key: str) -> bool:
    """Whether a conninfo or query parameter name holds a password (sslpassword too)."""
    name = (decoded(key) or key).strip().lower()
    return name.endswith("password") or name in ("passwd", "pwd")


@dataclasses.dataclass(frozen=True)
class _Setting:
    """One `key=value` of a conninfo: where its value is written, and the value unescaped."""

    key: str
    start: int
    end: int
    value: str


def _conninfo_settings(text: str) -> tuple[list[_Setting], bool]:
    """The `key=value` settings of a libpq conninfo, parsed as libpq does, and whether all parsed.

    Values are single-quoted or bare, with backslash escapes in both; `end` is
    past the closing quote. On a syntax error the settings before it are kept.
    """
    settings: list[_Setting] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] in _LIBPQ_SPACE:
            i += 1
            continue
        key_start = i
        while i < n and text[i] != "=" and text[i] not in _LIBPQ_SPACE:
            i += 1
        key = text[key_start:i]
        while i < n and text[i] in _LIBPQ_SPACE:
            i += 1
        if i >= n or text[i] != "=":
            return settings, False
        i += 1
        while i < n and text[i] in _LIBPQ_SPACE:
            i += 1
        start, chars = i, []
        quoted = i < n and text[i] == "'"
        i += quoted
        while i < n:
            char = text[i]
            if char == "\\":
                chars.append(text[i + 1 : i + 2])
                i += 2
            elif (char == "'") if quoted else (char in _LIBPQ_SPACE):
                break
            else:
                chars.append(char)
                i += 1
        if quoted and i >= n:
            settings.append(_Setting(key, start, n, "".join(chars)))
            return settings, False
        i += quoted
        settings.append(_Setting(key, start, min(i, n), "".join(chars)))
    return settings, True


def _url_secret_params(text: str, parts: URLParts) -> list[tuple[int, str]]:
    """(where the value starts, the raw value up to '&') of each password-like query parameter."""
    found = []
    for match in _URL_PARAM.finditer(text, parts.start):
        if _secret_key(match.group(1)):
            value = text[match.end() :].split("&", 1)[0]
            found.append((match.end(), value))
    return found


def _secret_spans(text: str) -> tuple[list[tuple[int, int]], list[str]]:
    """The spans of `text` that may hold a password, and the passwords as the drivers read them.

    A password query parameter is hidden to the end of the URL and a malformed
    conninfo (libpq syntax, plain keywords) from its first password setting on:
    what follows may be part of it.
    """
    parts = split_url(text)
    if parts is not None:
        spans, values = [], []
        if parts.password_span:
            spans.append(parts.password_span)
            values.append(decoded(parts.password or "") or "")
        for start, value in _url_secret_params(text, parts):
            spans.append((start, len(text)))
            values += [value, decoded(value) or ""]
        return spans, values
    settings, complete = _conninfo_settings(text)
    secret = [s for s in settings if _secret_key(s.key)]
    values = [s.value for s in secret]
    if complete and all(_KEYWORD.fullmatch(s.key) for s in settings):
        return [(s.start, s.end) for s in secret], values
    starts = [s.start for s in secret] + [m.end() for m in _PASSWORD_WORD.finditer(text)]
    spans = [(min(starts), len(text))] if starts else []
    at = text.rfind("@")
    colon = text.find(":", 0, max(at, 0))
    if colon >= 0:
        spans.append((colon + 1, at))
    return spans, values


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Non-empty spans, overlapping or touching ones joined, in order."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def mask(url: str) -> str:
    """The URL (or libpq conninfo) with its passwords replaced by `***`, for logs and messages.

    Covers the user info (to the last '@'), password query parameters and
    `password=` settings, quoted or not; a malformed string is masked wider.
    """
    spans, _ = _secret_spans(url)
    for start, end in reversed(_merged(spans)):
        url = url[:start] + MASK + url[end:]
    return url


def passwords(text: str) -> tuple[str, ...]:
    """Every password of a URL or conninfo, raw and decoded, for `scrub`; empty ones left out."""
    spans, values = _secret_spans(text)
    found = [text[start:end] for start, end in spans] + values
    return tuple(dict.fromkeys(value for value in found if value))


def _forms(secret: str) -> set[str]:
    """The ways a secret can show up in a message: as is, decoded, encoded, repr-escaped, pieces."""
    forms = {secret, repr(secret)[1:-1], quote(secret, safe=""), decoded(secret) or ""}
    forms.update(_PIECE_DELIMITERS.split(secret))
    return {form for form in forms if len(form) >= 4 or form == secret}


def scrub(text: str, *secrets: str | bytes | None) -> str:
    """`text` without the given secrets (nor their pieces), and with any URL or `password=` masked.

    For driver messages shown to users; secrets shorter than three characters are left alone.
    """
    forms: set[str] = set()
    for secret in secrets:
        if isinstance(secret, bytes):
            secret = secret.decode("utf-8", "replace")
        if secret and len(secret) >= 3:
            forms |= _forms(secret)
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, MASK)
    text = _URL_IN_TEXT.sub(lambda match: mask(match.group()), text)
    return _PASSWORD_IN_TEXT.sub(lambda match: match.group(1) + MASK, text)


def malformed(what: str, text: str, reason: str) -> str:
    """The message for a malformed URL or conninfo: masked, a reason without user data, a hint."""
    return f"malformed {what} {mask(text)}: {reason}; {HINT}"


def without_quoted_data(message: str) -> str:
    """A libpq message with the user data it quotes ("...") replaced by "…"."""
    quotes = [i for i, char in enumerate(message) if char == '"']
    static = {i for i in quotes if message[i : i + 3] in _LIBPQ_STATIC_QUOTES}
    static |= {i + 2 for i in static}
    data = [i for i in quotes if i not in static]
    if not data:
        return message
    first, last = data[0], data[-1]
    return message[:first] + '"…"' + (message[last + 1 :] if last > first else "")


def postgres_problem(conninfo: str) -> str | None:
    """Why libpq would reject or misread a conninfo or URL (a reason without user data), or None.

    libpq ends the user info at the first '@' or '/'; when that is not where
    `mask` ends it, the driver could show part of the password, so it is refused.
    """
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return None
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        message = scrub(" ".join(str(exc).split()), *passwords(conninfo))
        return without_quoted_data(message)
    except UnicodeError:
        return "a percent-encoded sequence is not UTF-8"
    except Exception as exc:
        return f"libpq cannot parse it ({type(exc).__name__})"
    parts = split_url(conninfo)
    if parts is not None and parts.password is not None:
        cut = _LIBPQ_USERINFO_END.search(conninfo, parts.start)
        if cut is None or cut.start() != parts.at:
            return "an '@' or '/' after the user name makes the password ambiguous"
    password = params.get("password")
    if password and password not in passwords(conninfo):
        return "the password cannot be told apart from the other settings"
    for port in str(params.get("port") or "").split(","):
        port = port.strip(_LIBPQ_SPACE)
        if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            return "the port is not a number from 1 to 65535"
    return None


def parse_mysql_url(url: str) -> dict[str, Any]:
    """`mysql://user:password@host:port/database` as PyMySQL connect options.

    The user info ends at the last '@', so the password may hold an unencoded
    '#', '/', '?', '@' or ':'; a malformed URL raises `DatabaseURLError`, masked.
    """
    parts = split_url(url)
    if parts is None or parts.scheme.lower() not in _MYSQL_SCHEMES:
        raise DatabaseURLError(f"not a MySQL URL (mysql://user:password@host:port/db): {mask(url)}")

    def bad(reason: str) -> DatabaseURLError:
        return DatabaseURLError(malformed("MySQL URL", url, reason))

    rest = parts.rest
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, path = rest[:cut], re.split(r"[?#]", rest[cut:], maxsplit=1)[0]
    if netloc.startswith("["):
        host, bracket, after = netloc[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise bad("the IPv6 address is not closed by ']' before the port")
        port_text = after[1:]
    elif "[" in netloc or "]" in netloc:
        raise bad("a '[' or ']' outside an IPv6 address")
    else:
        host, _, port_text = netloc.partition(":")
    if port_text and not (port_text.isascii() and port_text.isdigit()):
        raise bad("the port is not a number")
    port = int(port_text) if port_text else 0
    if port > 65535:
        raise bad("the port is out of range 0-65535")
    name, percent, zone = host.partition("%")
    options: dict[str, Any] = {"host": name.lower() + percent + zone or "127.0.0.1"}
    options["port"] = port or 3306
    for key, raw in (("user", parts.user), ("password", parts.password), ("database", path)):
        raw = (raw or "").strip("/") if key == "database" else raw or ""
        if not raw:
            continue
        value = decoded(raw)
        if value is None:
            raise bad(
                "a '%' is not followed by two hex digits"
                if _BAD_ESCAPE.search(raw)
                else "a percent-encoded sequence is not UTF-8"
            )
        options[key] = value
    return options


_URL_NAME = re.compile(r"(?:URL|URI|DSN)\Z", re.IGNORECASE)
_SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN", re.IGNORECASE)
_FRAGMENT_CUTS = re.compile(r"[^A-Za-z0-9]")
_NOT_A_SECRET = re.compile(
    r"true|false|yes|no|on|off|none|null|enabled?|disabled?|[0-9]{1,5}", re.IGNORECASE
)
"""The values of a `*SECRET*` or `*TOKEN*` variable that are settings, not secrets
(`USE_SECRETS=true`): hiding them would hide every `true` or `1` of the output."""
_SHORTEST_FRAGMENT = 4
_SHORTEST_SECRET = 3
_MOST_CUTS = 48


def _fragments(secret: str) -> set[str]:
    """Every run of `secret` between two cut points (its ends, and either side of each
    character that is neither a letter nor a digit, and past the two after a '%'), of four
    characters or more.

    A parser that stops at a '%', '@', ':' or quote may quote the part before or after it,
    or what lies between two of them: each is a fragment to hide.
    """
    cuts = {0, len(secret)}
    for match in _FRAGMENT_CUTS.finditer(secret):
        cuts.update((match.start(), match.end()))
        if match.group() == "%":
            cuts.add(min(match.end() + 2, len(secret)))
    points = sorted(cuts)
    if len(points) > _MOST_CUTS:
        pairs = [(0, b) for b in points] + [(a, len(secret)) for a in points]
    else:
        pairs = [(a, b) for i, a in enumerate(points) for b in points[i + 1 :]]
    return {secret[a:b] for a, b in pairs if b - a >= _SHORTEST_FRAGMENT}


class Redactor:
    """Hides known secrets, their encodings and their fragments, in any text shown to a user.

    It learns them from URLs and conninfo strings (their passwords) and from whole values
    (a `*PASSWORD*` variable); `from_environ` reads every such environment variable.
    """

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._forms: list[str] = []

    def add_secret(self, secret: str | None) -> None:
        """Hide `secret` (at least three characters) and every form and fragment of it."""
        if not secret or len(secret) < _SHORTEST_SECRET or secret in self._secrets:
            return
        self._secrets.add(secret)
        forms = set(self._forms)
        for form in {secret, decoded(secret) or secret}:
            forms |= _forms(form) | _fragments(form)
            forms |= {
                ascii(form)[1:-1],
                json.dumps(form)[1:-1],
                quote(form, safe=""),
                form.encode("unicode_escape").decode(),
            }
        forms = {form for form in forms if len(form) >= _SHORTEST_FRAGMENT or form == secret}
        self._forms = sorted(forms, key=len, reverse=True)

    def add_url(self, text: str | None) -> None:
        """Hide the passwords of a URL or libpq conninfo string (none: nothing to hide)."""
        if not text:
            return
        for secret in passwords(text):
            self.add_secret(secret)

    def add_setting(self, name: str, value: str | None) -> None:
        """Learn from a named setting: a URL's or DSN's passwords, a password's whole value."""
        if not value:
            return
        if _SECRET_NAME.search(name):
            if not _NOT_A_SECRET.fullmatch(value.strip()):
                self.add_secret(value)
            self.add_url(value)
        elif _URL_NAME.search(name):
            self.add_url(value)

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> Redactor:
        """A redactor for every `*_URL`, `*_URI`, `*_DSN`, `*PASSWORD*`, `*SECRET*` and
        `*TOKEN*` variable of the environment (`os.environ` by default)."""
        redactor = cls()
        for name, value in (os.environ if environ is None else environ).items():
            redactor.add_setting(name, value)
        return redactor

    def __bool__(self) -> bool:
        return bool(self._forms)

    def __call__(self, text: str) -> str:
        """`text` with every known secret, form and fragment replaced by `***`."""
        for form in self._forms:
            if form in text:
                text = text.replace(form, MASK)
        return text


class RedactingStream(io.TextIOBase):
    """A text stream that writes to `target` what `redact` leaves of each line.

    A line is held until its end (or a flush), so a secret written in two pieces is
    still seen whole; the target's buffer is not exposed, nothing can bypass it.
    """

    def __init__(self, target: Any, redact: Callable[[str], str]) -> None:
        super().__init__()
        self.target = target
        self.redact = redact
        self._pending = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The target's encoding."""
        return getattr(self.target, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        """The target's error handler."""
        return getattr(self.target, "errors", None)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return bool(getattr(self.target, "isatty", lambda: False)())

    def fileno(self) -> int:
        return int(self.target.fileno())

    def write(self, text: str | bytes) -> int:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode(self.encoding, "replace")
        elif not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self.target.write("".join(self.redact(line) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.target.write(self.redact(self._pending))
            self._pending = ""
        with contextlib.suppress(Exception):
            self.target.flush()

    def close(self) -> None:
        """Write what is held; the target stays open (it is not this stream's)."""
        self.flush()
