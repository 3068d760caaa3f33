"""DNS-rebinding protection of `/mcp` against real server processes, and through nginx.

MCP's streamable HTTP transport: "Servers MUST validate the Origin header on all incoming
connections … If the Origin header is present and invalid, servers MUST respond with HTTP 403
Forbidden." An `initialize` with `Host: evil.example.com` or `Origin: http://evil.example.com`
answers 403 with our error body, before the token is looked at; the allowed origin, or none,
answers 200. `MCP_ALLOWED_ORIGINS` changes what is allowed, and behind the README's nginx site
(which forwards `Host` as `$host`) the host `PUBLIC_URL` names is accepted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from foundation.version import VERSION
from tests.mcp_support import McpServer, mcp_server
from tests.nginx_support import running_nginx

pytestmark = pytest.mark.slow

HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
}
APP = "https://app.example.org"  # the one page the configured server allows
PUBLIC = "mcp.test"  # the configured server's PUBLIC_URL host, as nginx forwards it


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    """The defaults: loopback on the served port."""
    with mcp_server(tmp_path_factory.mktemp("mcp-origins")) as running:
        yield running


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    settings = {"MCP_ALLOWED_ORIGINS": APP, "PUBLIC_URL": f"http://{PUBLIC}"}
    with mcp_server(tmp_path_factory.mktemp("mcp-origins-set"), **settings) as running:
        yield running


def initialize(url: str, token: str | None, **headers: str) -> requests.Response:
    sent = {**HEADERS, **({} if token is None else {"Authorization": f"Bearer {token}"}), **headers}
    return requests.post(url, json=INITIALIZE, headers=sent, timeout=30)


def port_of(server: McpServer) -> int:
    return int(server.base_url.rsplit(":", 1)[1])


def refused(answer: requests.Response, code: str) -> None:
    assert answer.status_code == 403, answer.text[:300]
    body: dict[str, Any] = answer.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and "/mcp" in body["error"]["message"]


def served(answer: requests.Response) -> None:
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json()["result"]["serverInfo"] == {"name": "orchestrator", "version": VERSION}


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"Host": "evil.example.com"}, "host_not_allowed"),
        ({"Host": "evil.example.com:{port}", "Origin": "http://evil.example.com:{port}"}, "host_not_allowed"),
        ({"Origin": "http://evil.example.com"}, "origin_not_allowed"),
        ({"Origin": "http://127.0.0.1:1"}, "origin_not_allowed"),
        ({"Origin": "null"}, "origin_not_allowed"),
        ({"Host": PUBLIC}, "host_not_allowed"),  # only PUBLIC_URL makes it ours (below)
        ({"Origin": APP}, "origin_not_allowed"),  # only MCP_ALLOWED_ORIGINS makes it allowed (below)
    ],
)
def test_a_foreign_host_or_origin_is_403_before_the_token_is_read(
    plain: McpServer, headers: dict[str, str], code: str
) -> None:
    filled = {name: value.format(port=port_of(plain)) for name, value in headers.items()}
    refused(initialize(plain.url, plain.alice, **filled), code)
    refused(initialize(plain.url, None, **filled), code)  # not 401: nothing is said about tokens


@pytest.mark.parametrize(
    "headers",
    [
        {},  # no Origin: SDK clients and curl
        {"Origin": "http://127.0.0.1:{port}"},
        {"Host": "localhost:{port}", "Origin": "http://localhost:{port}"},
        {"Host": "[::1]:{port}", "Origin": "http://[::1]:{port}"},
    ],
)
def test_loopback_on_the_served_port_or_no_origin_is_served(plain: McpServer, headers: dict[str, str]) -> None:
    filled = {name: value.format(port=port_of(plain)) for name, value in headers.items()}
    served(initialize(plain.url, plain.alice, **filled))


def test_the_setting_changes_what_is_allowed(configured: McpServer) -> None:
    served(initialize(configured.url, configured.alice, Origin=APP))
    served(initialize(configured.url, configured.alice, Host="app.example.org", Origin=APP))
    served(initialize(configured.url, configured.alice, Host=PUBLIC))
    served(initialize(configured.url, configured.alice))
    # the list replaced the default: loopback's own origin is no longer allowed
    refused(initialize(configured.url, configured.alice, Origin=configured.base_url), "origin_not_allowed")
    refused(initialize(configured.url, configured.alice, Origin="http://evil.example.com"), "origin_not_allowed")
    refused(initialize(configured.url, configured.alice, Host="evil.example.com"), "host_not_allowed")


def test_through_nginx_the_public_host_is_served_and_an_evil_origin_refused(
    configured: McpServer, tmp_path: Path
) -> None:
    with running_nginx(tmp_path / "nginx", [f"127.0.0.1:{port_of(configured)}"]) as nginx:
        url = f"{nginx.base}/mcp"

        def through(**headers: str) -> requests.Response:
            answer = initialize(url, configured.alice, Host=PUBLIC, **headers)
            assert "X-Upstream" in answer.headers  # nginx passed it to the server, which answered
            return answer

        served(through())
        served(through(Origin=APP))
        refused(through(Origin="http://evil.example.com"), "origin_not_allowed")
        refused(through(Origin=f"http://{PUBLIC}:{nginx.port}"), "origin_not_allowed")  # not in the list
        evil = initialize(url, configured.alice, Host="evil.example.com")
        refused(evil, "host_not_allowed")
