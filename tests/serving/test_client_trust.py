"""What the real server believes of a client before it has logged in: its address and scheme
(`X-Forwarded-For`, `X-Forwarded-Proto`) only from a proxy of `TRUSTED_PROXIES`, and its
`Expect: 100-continue` answered only once the request is authenticated."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
import requests

from config.settings import ConfigError, load_settings
from testing.hostile import ServerUnderTest, running_server

LOGIN_BUDGET = "login=2/minute"


@pytest.mark.parametrize(
    ("given", "kept"),
    [("", ""), (" 127.0.0.1 , 10.0.0.0/8,::1", "127.0.0.1,10.0.0.0/8,::1"), ("*", "*")],
)
def test_trusted_proxies_are_addresses_or_networks(given: str, kept: str):
    assert load_settings({"TRUSTED_PROXIES": given}, dotenv_path=None).trusted_proxies == kept


@pytest.mark.parametrize("given", ["nginx.local", "10.0.0.0/99", "127.0.0.1;"])
def test_a_trusted_proxy_that_is_no_address_stops_the_start(given: str):
    with pytest.raises(ConfigError, match="TRUSTED_PROXIES"):
        load_settings({"TRUSTED_PROXIES": given}, dotenv_path=None)


@pytest.mark.parametrize(("given", "kept"), [("", "auto"), ("AUTO", "auto"), ("true", "1"), ("off", "0")])
def test_cookie_secure_reads_as_env_booleans_do(given: str, kept: str):
    assert load_settings({"COOKIE_SECURE": given}, dotenv_path=None).cookie_secure == kept


@pytest.fixture(scope="module")
def direct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerUnderTest]:
    """No `TRUSTED_PROXIES`: a loopback client is a client like any other."""
    with running_server(tmp_path_factory.mktemp("direct"), {"RATE_LIMITS": LOGIN_BUDGET}) as server:
        yield server


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerUnderTest]:
    """A proxy on loopback (`TRUSTED_PROXIES=127.0.0.1`), as nginx on the same host."""
    env = {"RATE_LIMITS": LOGIN_BUDGET, "TRUSTED_PROXIES": "127.0.0.1"}
    with running_server(tmp_path_factory.mktemp("proxied"), env) as server:
        yield server


def login(server: ServerUnderTest, token: str, headers: dict[str, str]) -> requests.Response:
    return requests.post(f"{server.base}/api/login", json={"token": token}, headers=headers, timeout=10)


def spoofed_logins(server: ServerUnderTest, addresses: list[str]) -> list[int]:
    return [login(server, "oct_wrong", {"X-Forwarded-For": address}).status_code for address in addresses]


@pytest.mark.slow
def test_a_client_cannot_claim_a_fresh_address_per_login(direct: ServerUnderTest):
    assert spoofed_logins(direct, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]) == [401, 401, 429]


@pytest.mark.slow
def test_a_trusted_proxy_gives_each_forwarded_address_its_own_login_budget(proxied: ServerUnderTest):
    assert spoofed_logins(proxied, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]) == [401, 401, 401]
    assert spoofed_logins(proxied, ["10.0.0.4"] * 3) == [401, 401, 429]


def is_secure(response: requests.Response) -> bool:
    return "secure" in [part.strip().lower() for part in response.headers["Set-Cookie"].split(";")]


@pytest.mark.slow
def test_the_cookie_is_secure_when_a_trusted_proxy_says_https(direct: ServerUnderTest, proxied: ServerUnderTest):
    https = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "10.9.0.1"}
    assert is_secure(login(proxied, proxied.admin_token, https))
    assert not is_secure(login(proxied, proxied.admin_token, {"X-Forwarded-For": "10.9.0.2"}))
    assert not is_secure(login(direct, direct.admin_token, https))  # anyone can send the header


def expect_continue(
    server: ServerUnderTest, token: str, body: bytes, length: int | None = None
) -> tuple[bytes, socket.socket]:
    """Send the head of a `POST /sessions` with `Expect: 100-continue` and read the first answer."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    head = (
        "POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {length or len(body)}\r\nExpect: 100-continue\r\n\r\n"
    )
    sock.sendall(head.encode("ascii"))
    return sock.recv(65536), sock


def read_answer(sock: socket.socket, received: bytes) -> bytes:
    while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
        more = sock.recv(65536)
        if not more:
            break
        received += more
    return received


@pytest.mark.slow
def test_100_continue_only_after_the_token_is_checked(direct: ServerUnderTest):
    body = json.dumps({"name": "uploaded"}).encode()
    first, sock = expect_continue(direct, "oct_wrong", body)
    with sock:
        assert first.startswith(b"HTTP/1.1 401 "), first  # not 100 Continue: the body is never sent
        answer = read_answer(sock, first)
        assert b'"unauthorized"' in answer and b"connection: close" in answer.lower()
    first, sock = expect_continue(direct, direct.admin_token, body)
    with sock:
        assert first == b"HTTP/1.1 100 Continue\r\n\r\n", first
        sock.sendall(body)
        answer = read_answer(sock, b"")
        assert answer.startswith(b"HTTP/1.1 201 "), answer
        assert b'"uploaded"' in answer


@pytest.mark.slow
def test_a_body_over_the_limit_is_refused_before_100_continue(direct: ServerUnderTest):
    first, sock = expect_continue(direct, direct.admin_token, b"", length=64 * 1024 * 1024)
    with sock:
        assert first.startswith(b"HTTP/1.1 413 "), first
        assert b'"payload_too_large"' in read_answer(sock, first)
