"""The `MCP_SERVERS` file: the shape MCP hosts already use, plus our fields per server.

    {"mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {}, "cwd": "/srv"},
        "docs": {"url": "https://docs.example.org/mcp", "headers": {"Authorization": "Bearer …"},
                 "trusted": false},
    }}

Ours: `allow` (tool names; absent: every tool), `prefix` (absent: the key and `_`), `trusted`
(an HTTP server on a private address the operator vouches for: the SSRF rules are skipped),
`timeout_s` (a call's deadline). Read once at start-up with pydantic: a wrong file stops the
app with a `ConfigError` naming the field, never a server that silently lacks its tools.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from config.settings import ConfigError

MAX_SERVERS = 32


class _Server(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    allow: list[str] | None = None  # tool names as the server lists them; None: all
    prefix: str | None = None  # None: the key and "_"
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    type: str | None = None  # some hosts write "stdio" / "http"; read, not needed


class StdioServer(_Server):
    """A server we start as a child process and speak to over its stdin/stdout."""

    command: Annotated[str, Field(min_length=1)]
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None


class HttpServer(_Server):
    """A server reached over streamable HTTP."""

    url: Annotated[str, Field(min_length=1)]
    headers: dict[str, str] = Field(default_factory=dict)
    trusted: bool = False  # skip the SSRF rules (a server on loopback or a private network)

    @field_validator("url")
    @classmethod
    def _http_only(cls, url: str) -> str:
        if not url.lower().startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return url


ServerConfig = StdioServer | HttpServer


def _transport(value: Any) -> str:
    return "stdio" if isinstance(value, dict) and "command" in value else "http"


_Entry = Annotated[Annotated[StdioServer, Tag("stdio")] | Annotated[HttpServer, Tag("http")], Discriminator(_transport)]


class _File(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")  # hosts keep other keys beside mcpServers

    mcpServers: dict[str, _Entry] = Field(max_length=MAX_SERVERS)


def prefix_of(key: str, server: ServerConfig) -> str:
    return f"{key}_" if server.prefix is None else server.prefix


def parse_servers(text: str, source: str = "MCP_SERVERS") -> dict[str, ServerConfig]:
    """The servers of one file's text; `ConfigError` names the file and the bad field."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{source}: not JSON ({error.msg} at line {error.lineno})") from None
    if isinstance(raw, dict) and isinstance(raw.get("mcpServers"), dict):
        for key, value in raw["mcpServers"].items():
            if isinstance(value, dict) and "command" in value and "url" in value:
                raise ConfigError(f"{source}: mcpServers.{key}: give either command (stdio) or url (HTTP), not both")
            if isinstance(value, dict) and "command" not in value and "url" not in value:
                raise ConfigError(f"{source}: mcpServers.{key}: needs command (stdio) or url (HTTP)")
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(f"{_where(item['loc'])}: {item['msg']}" for item in error.errors()[:10])
        raise ConfigError(f"{source}: {problems}") from None
    return dict(parsed.mcpServers)


def _where(loc: tuple[str | int, ...]) -> str:
    """`mcpServers.time.args.0`, leaving out pydantic's union branch names."""
    return ".".join(str(part) for part in loc if part not in ("stdio", "http"))


def load_servers(path: str | None) -> dict[str, ServerConfig]:
    """The servers `MCP_SERVERS` names (none when unset)."""
    if not path:
        return {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"MCP_SERVERS: cannot read {path}: {error.strerror}") from None
    return parse_servers(text, f"MCP_SERVERS ({path})")
