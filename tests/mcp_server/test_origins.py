"""Which `Origin` and `Host` `/mcp` lets through (`mcp_server/origins.py`), from settings alone.

Tables of settings and headers: the default fits `HOST`, `PORT` and `PUBLIC_URL`, the setting
replaces it or adds to it (`default,…`), a bad origin stops the start with an error naming the
setting. The real server, and nginx in front of it, are tests/mcp_server/test_mcp_origins.py.
"""

from __future__ import annotations

import pytest

from config.origins import normalized_origin
from config.settings import ConfigError, load_settings
from mcp_server.origins import OriginCheck


def check(**environ: str) -> OriginCheck:
    return OriginCheck.of(load_settings(environ, dotenv_path=None))


def test_the_default_is_loopback_on_the_served_port() -> None:
    assert check(PORT="5000").origins == {"http://127.0.0.1:5000", "http://localhost:5000", "http://[::1]:5000"}
    assert check().hosts == {"127.0.0.1", "localhost", "::1"}


def test_the_default_adds_host_and_public_url() -> None:
    found = check(HOST="192.168.1.5", PORT="8080", PUBLIC_URL="https://Chat.Example.com:443/app/")
    assert found.origins == {
        "http://127.0.0.1:8080",
        "http://localhost:8080",
        "http://[::1]:8080",
        "http://192.168.1.5:8080",
        "https://chat.example.com",
    }
    assert found.hosts == {"127.0.0.1", "localhost", "::1", "192.168.1.5", "chat.example.com"}
    assert found.any_address is False


def test_a_listed_origin_replaces_the_default_and_default_keeps_it() -> None:
    only = check(PORT="5000", MCP_ALLOWED_ORIGINS="https://app.example.org")
    assert only.origins == {"https://app.example.org"}
    assert only.hosts == {"127.0.0.1", "localhost", "::1", "app.example.org"}  # loopback is always ours
    both = check(PORT="5000", MCP_ALLOWED_ORIGINS="default, HTTP://LOCALHOST:6274")
    assert both.origins == {
        "http://127.0.0.1:5000",
        "http://localhost:5000",
        "http://[::1]:5000",
        "http://localhost:6274",
    }


# (Host, Origin) -> the refusal's code (None: let through), with HOST=127.0.0.1, PORT=5000,
# PUBLIC_URL=https://chat.example.com
CASES: list[tuple[str | None, str | None, str | None]] = [
    ("127.0.0.1:5000", None, None),
    ("localhost:5000", "http://localhost:5000", None),
    ("[::1]:5000", "http://[::1]:5000", None),
    ("LOCALHOST:5000", "http://LocalHost:5000", None),  # names are case-insensitive
    ("chat.example.com", "https://chat.example.com", None),  # behind nginx: $host has no port
    ("chat.example.com:8443", "https://chat.example.com:443", None),  # the default port, written out
    ("evil.example.com", None, "host_not_allowed"),
    ("evil.example.com:5000", "http://evil.example.com:5000", "host_not_allowed"),  # a rebinding page
    ("127.0.0.1:5000", "http://evil.example.com", "origin_not_allowed"),
    ("127.0.0.1:5000", "http://127.0.0.1:5001", "origin_not_allowed"),  # another port is another origin
    ("127.0.0.1:5000", "https://127.0.0.1:5000", "origin_not_allowed"),  # and another scheme
    ("chat.example.com", "http://chat.example.com", "origin_not_allowed"),
    ("127.0.0.1:5000", "null", "origin_not_allowed"),  # a sandboxed page or a file
    ("127.0.0.1:5000", "", "origin_not_allowed"),
    ("127.0.0.1:5000", "http://127.0.0.1:5000/path", "origin_not_allowed"),
    ("10.0.0.7:5000", None, "host_not_allowed"),  # HOST is one address: not every address is ours
    (None, None, "host_not_allowed"),
    ("", None, "host_not_allowed"),
    ("[not an address", None, "host_not_allowed"),
]


@pytest.mark.parametrize(("host", "origin", "code"), CASES)
def test_host_and_origin_are_checked(host: str | None, origin: str | None, code: str | None) -> None:
    found = check(HOST="127.0.0.1", PORT="5000", PUBLIC_URL="https://chat.example.com").refusal(host, origin)
    assert (found and found.code) == code
    if found is not None:
        assert "/mcp" in found.message


def test_with_every_interface_any_address_is_a_host_of_ours_but_no_name_is() -> None:
    everywhere = check(HOST="0.0.0.0", PORT="5000")
    assert everywhere.refusal("10.0.0.7:5000", None) is None
    assert everywhere.refusal("[fd00::7]:5000", None) is None
    assert everywhere.refusal("evil.example.com:5000", None).code == "host_not_allowed"  # type: ignore[union-attr]
    assert everywhere.refusal("10.0.0.7:5000", "http://10.0.0.7:5000").code == "origin_not_allowed"  # type: ignore[union-attr]
    assert "http://0.0.0.0:5000" not in everywhere.origins


def test_a_refused_value_is_shown_cut() -> None:
    found = check().refusal("127.0.0.1", "http://" + "a" * 5000 + ".example")
    assert found is not None and found.code == "origin_not_allowed" and len(found.message) < 400


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MCP_ALLOWED_ORIGINS", "chat.example.com"),
        ("MCP_ALLOWED_ORIGINS", "https://chat.example.com/mcp"),
        ("MCP_ALLOWED_ORIGINS", "ftp://chat.example.com"),
        ("MCP_ALLOWED_ORIGINS", "https://chat.example.com:99999"),
        ("PUBLIC_URL", "chat.example.com"),
        ("PUBLIC_URL", "https://user@chat.example.com"),
    ],
)
def test_a_bad_value_stops_the_start_naming_the_setting(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        load_settings({variable: value}, dotenv_path=None)


@pytest.mark.parametrize(
    ("text", "origin"),
    [
        ("https://Chat.Example.com:443", "https://chat.example.com"),
        ("http://chat.example.com:80/", "http://chat.example.com"),
        ("http://[::1]:5000", "http://[::1]:5000"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ],
)
def test_origins_are_normalised_as_browsers_write_them(text: str, origin: str) -> None:
    assert normalized_origin(text) == origin
