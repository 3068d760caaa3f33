"""Which `Origin` and `Host` may reach `/mcp`: DNS-rebinding protection, which MCP's streamable
HTTP transport makes a MUST ("If the Origin header is present and invalid, servers MUST respond
with HTTP 403 Forbidden", revision 2025-11-25, Security Warning).

The attack: a page of `evil.example.com` has its name re-pointed at this machine, and the
browser then lets it call `http://evil.example.com:PORT/mcp`, which lands here. Its requests
carry `Origin: http://evil.example.com:PORT` and `Host: evil.example.com:PORT`, both refused:

- `Origin`, when present, must be one of `MCP_ALLOWED_ORIGINS` (by default the served port on
  loopback and on `HOST`, and `PUBLIC_URL`'s origin), compared exactly (scheme, host and port,
  normalised by `config/origins.py`), else 403 `origin_not_allowed`. A request without one
  passes: SDK clients and curl send none, and a browser always does on a cross-origin POST.
- `Host` must name loopback, `HOST`, `PUBLIC_URL`'s host or an allowed origin's, else 403
  `host_not_allowed`. Only the name is compared, not the port: the port is the one the client
  dialled (a proxy's, a container's published one), and nginx's `proxy_set_header Host $host`
  drops it; the name is what a rebinding attack cannot choose. With `HOST` `0.0.0.0` or `::`
  the server answers on every address of the machine, so any IP address is a Host it serves (a
  rebinding page always sends a name).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from config.origins import DEFAULT_WORD, authority, normalized_origin, url_origin
from config.settings import Settings
from tools.safe_http import is_ip_literal

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")  # "every interface": any address of the machine is ours
SHOWN_CHARS = 200  # of a refused header's value, in the error message


@dataclass(frozen=True)
class Refusal:
    code: str  # origin_not_allowed | host_not_allowed: 403
    message: str


def default_origins(settings: Settings) -> list[str]:
    """The origins `default` stands for: the served port on loopback and on `HOST`, and `PUBLIC_URL`'s."""
    names = [*LOOPBACK_NAMES, *([] if settings.host in WILDCARD_HOSTS else [settings.host])]
    origins = [f"http://{authority(name, settings.port)}" for name in names]
    if settings.public_url:
        origins.append(url_origin(settings.public_url))
    return list(dict.fromkeys(normalized_origin(origin) for origin in origins))


def hostname_of(origin: str) -> str:
    return urlsplit(origin).hostname or ""


@dataclass(frozen=True)
class OriginCheck:
    """The allowed origins and Host names of one server, from its settings (see the module's docstring)."""

    origins: frozenset[str]
    hosts: frozenset[str]
    any_address: bool  # HOST is a wildcard: any IP address is a Host of ours

    @classmethod
    def of(cls, settings: Settings) -> OriginCheck:
        origins: list[str] = []
        for item in filter(None, settings.mcp_allowed_origins.split(",")):
            origins.extend(default_origins(settings) if item == DEFAULT_WORD else [item])
        hosts = {*LOOPBACK_NAMES, *(hostname_of(origin) for origin in [*default_origins(settings), *origins])}
        return cls(frozenset(origins), frozenset(hosts), settings.host in WILDCARD_HOSTS)

    def refusal(self, host: str | None, origin: str | None) -> Refusal | None:
        """Why a request with these `Host` and `Origin` headers is refused, or None when it is not."""
        if not self.host_allowed(host):
            shown = f"Host {host[:SHOWN_CHARS]!r}" if host else "a request without Host"
            return Refusal("host_not_allowed", f"/mcp is not served for {shown} (see PUBLIC_URL)")
        if origin is not None and not self.origin_allowed(origin):
            shown = repr(origin[:SHOWN_CHARS])
            return Refusal("origin_not_allowed", f"pages of Origin {shown} may not call /mcp (see MCP_ALLOWED_ORIGINS)")
        return None

    def origin_allowed(self, origin: str) -> bool:
        try:
            return normalized_origin(origin) in self.origins
        except ValueError:  # `null` (a sandboxed page, a file), or not an origin at all
            return False

    def host_allowed(self, host: str | None) -> bool:
        if not host:
            return False
        try:
            name = urlsplit(f"//{host}").hostname
        except ValueError:
            return False
        if not name:
            return False
        if name in self.hosts:
            return True
        return self.any_address and is_ip_literal(name)
