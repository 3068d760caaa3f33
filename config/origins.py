"""Web origins as settings hold them: `scheme://host[:port]`, normalised so that equal origins
are equal strings (`PUBLIC_URL`, `MCP_ALLOWED_ORIGINS`; `mcp_server/origins.py` compares them).

An origin is an `http` or `https` URL with a host and nothing after it (a `/` at most): the
scheme and host lower-cased, an IPv6 address in brackets, the scheme's default port dropped
(`https://chat.example.com:443` is `https://chat.example.com`), as a browser writes `Origin`.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
DEFAULT_WORD = "default"  # in MCP_ALLOWED_ORIGINS: the origins derived from HOST, PORT and PUBLIC_URL


def authority(host: str, port: int | None, scheme: str = "http") -> str:
    """`host[:port]` as a URL writes it (IPv6 in brackets, the scheme's default port left out)."""
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None or DEFAULT_PORTS.get(scheme) == port else f"{shown}:{port}"


def _split(text: str) -> tuple[SplitResult, str]:
    """`text` split as an http(s) URL with a host, and its origin; a ValueError says what is wrong."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError as error:
        raise ValueError(f"{text.strip()!r} is not a URL ({error})") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
        raise ValueError(f"{text.strip()!r} is not an http:// or https:// URL with a host (and no user)")
    return parts, f"{scheme}://{authority(parts.hostname, port, scheme)}"


def url_origin(url: str) -> str:
    """The origin of an http(s) URL (its path, if any, left out)."""
    return _split(url)[1]


def normalized_origin(text: str) -> str:
    """`text`, which must be an origin, normalised (see the module's docstring)."""
    parts, origin = _split(text)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{text.strip()!r} is not an origin: only scheme://host[:port], no path")
    return origin


def checked_public_url(value: object) -> object:
    """`PUBLIC_URL`: an http(s) URL with a host (a path is allowed and kept)."""
    if isinstance(value, str):
        url_origin(value)
        return value.strip()
    return value


def checked_origins(value: object) -> object:
    """`MCP_ALLOWED_ORIGINS`: comma-separated origins or the word `default`, normalised and joined
    with `,`; an item that is neither stops the start with an error naming it."""
    if not isinstance(value, str):
        return value
    items = [item.strip() for item in value.split(",") if item.strip()]
    return ",".join(item.lower() if item.lower() == DEFAULT_WORD else normalized_origin(item) for item in items)
