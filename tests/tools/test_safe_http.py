"""tools/safe_http.py: every SSRF refusal, the caps, and success against a loopback server.

Refusals run with `allow_private_fetch=False`. Where a test needs a "public" host, it fakes
the network below the module: `socket.getaddrinfo` (DNS) and urllib3's `create_connection`
(routing a public IP to the loopback test server). The pipeline is never patched.
"""

from __future__ import annotations

import gzip
import ipaddress
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3.util.connection

from config.settings import Settings
from testing.fake_web import FakeWebServer, Page
from tools.base import ErrorCode, ToolContext, ToolFailure
from tools.safe_http import MAX_BYTES, address_problem, safe_get

PUBLIC_IP = "93.184.216.34"
_real_getaddrinfo = socket.getaddrinfo


def make_ctx(*, allow_private: bool = False, seconds: float = 5.0) -> ToolContext:
    return ToolContext(
        conn=None,
        database=None,
        settings=Settings(allow_private_fetch=allow_private),  # type: ignore[arg-type]
        user_id=1,
        deadline=time.monotonic() + seconds,
    )


def refusal(url: str, **ctx_args: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        safe_get(url, make_ctx(**ctx_args))
    return caught.value


@pytest.fixture
def web() -> Iterator[FakeWebServer]:
    with FakeWebServer() as server:
        yield server


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Names -> addresses (a list, or a list of lists consumed one lookup at a time)."""
    table: dict[str, Any] = {}

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in table:
            answers = table[host]
            addresses = answers.pop(0) if answers and isinstance(answers[0], list) else answers
            if not addresses:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return [
                (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in addresses
            ]
        return _real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table


@pytest.fixture
def route_public_to(monkeypatch: pytest.MonkeyPatch) -> Callable[[FakeWebServer], list[tuple[str, int]]]:
    """Make PUBLIC_IP:80 reach the loopback server; returns the addresses urllib3 dialled."""

    def install(server: FakeWebServer) -> list[tuple[str, int]]:
        dialled: list[tuple[str, int]] = []
        real = urllib3.util.connection.create_connection

        def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
            dialled.append(address)
            if address[0] == PUBLIC_IP:
                address = ("127.0.0.1", server.port)
            return real(address, *args, **kwargs)

        monkeypatch.setattr(urllib3.util.connection, "create_connection", create_connection)
        return dialled

    return install


# Refusals by scheme and by address ---------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "not file://"),
        ("ftp://ftp.example.com/pub", "not ftp://"),
        ("gopher://127.0.0.1:70/_stats", "not gopher://"),
        ("example.com/no-scheme", "without a scheme"),
        ("http://127.0.0.1/", "127.0.0.1 is a loopback address"),
        ("http://localhost/", "localhost resolves to a loopback address"),
        ("http://[::1]/", "::1 is a loopback address"),
        ("http://0.0.0.0/", "unspecified address"),
        ("http://10.0.0.1/", "private-network address"),
        ("http://192.168.1.1/admin", "private-network address"),
        ("http://100.64.0.1/", "shared (CGNAT) address"),
        ("http://169.254.169.254/latest/meta-data", "cloud metadata address"),
        ("http://[fd00:ec2::254]/latest/meta-data", "cloud metadata address"),
        ("http://[::ffff:127.0.0.1]/", "IPv4-mapped form of a loopback address"),
        ("http://2130706433/", "2130706433 resolves to a loopback address"),
        ("http://0x7f000001/", "0x7f000001 resolves to a loopback address"),
        ("http://017700000001/", "017700000001 resolves to a loopback address"),
        ("http://example.com@127.0.0.1/", "127.0.0.1 is a loopback address"),
        ("http://user:pass@[::1]:8080/", "::1 is a loopback address"),
    ],
)
def test_refused_urls(url: str, reason: str) -> None:
    failure = refusal(url)
    assert failure.code == ErrorCode.PERMISSION_DENIED
    assert reason in failure.message


@pytest.mark.parametrize(
    "url",
    ["http://169.254.169.254/latest/meta-data", "http://[fd00:ec2::254]/", "http://0.0.0.0/", "http://[fe80::1]/"],
)
def test_metadata_unspecified_and_link_local_are_refused_even_when_private_is_allowed(url: str) -> None:
    assert refusal(url, allow_private=True).code == ErrorCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
        ("127.0.0.2", "a loopback address"),
        ("172.16.5.4", "a private-network address"),
        ("fc00::1", "a private-network address"),
        ("100.127.255.254", "a shared (CGNAT) address"),
        ("224.0.0.1", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("240.0.0.1", "a reserved address"),
        ("fe80::1", "a link-local address"),
        ("169.254.10.10", "a link-local address"),
        ("::", "the unspecified address"),
        ("2002:7f00:1::", "the 6to4 form of a loopback address"),
        ("2002:a00:1::", "the 6to4 form of a private-network address"),
        ("64:ff9b::a00:1", "the NAT64 form of a private-network address"),
        ("64:ff9b::a9fe:a9fe", "the NAT64 form of a cloud metadata address"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "the Teredo form of a loopback address"),
        ("::ffff:169.254.169.254", "the IPv4-mapped form of a cloud metadata address"),
    ],
)
def test_address_table(address: str, expected: str | None) -> None:
    assert address_problem(ipaddress.ip_address(address)) == expected


def test_dns_name_resolving_to_a_private_address_is_refused(fake_dns: dict[str, Any]) -> None:
    fake_dns["intranet.example.com"] = ["10.1.2.3"]
    failure = refusal("http://intranet.example.com/")
    assert failure.code == ErrorCode.PERMISSION_DENIED
    assert "intranet.example.com resolves to a private-network address" in failure.message
    assert "10.1.2.3" not in failure.message


def test_any_private_address_among_several_is_refused(fake_dns: dict[str, Any]) -> None:
    fake_dns["mixed.example.com"] = [PUBLIC_IP, "::1"]
    assert "loopback" in refusal("http://mixed.example.com/").message


def test_unresolvable_host_is_not_found(fake_dns: dict[str, Any]) -> None:
    fake_dns["nowhere.example.com"] = []
    assert refusal("http://nowhere.example.com/").code == ErrorCode.NOT_FOUND


# Redirects ------------------------------------------------------------------------------------


def test_public_page_redirecting_to_loopback_is_refused(web, fake_dns, route_public_to) -> None:
    fake_dns["public.example.com"] = [PUBLIC_IP]
    dialled = route_public_to(web)
    web.routes["/start"] = Page(status=302, headers={"Location": f"http://127.0.0.1:{web.port}/secret"})
    web.routes["/secret"] = Page("internal only")
    failure = refusal("http://public.example.com/start")
    assert failure.code == ErrorCode.PERMISSION_DENIED
    assert "127.0.0.1 is a loopback address" in failure.message
    assert [r.path for r in web.requests] == ["/start"]
    assert dialled == [(PUBLIC_IP, 80)]


def test_redirect_to_a_name_that_resolves_privately_is_refused(web, fake_dns, route_public_to) -> None:
    fake_dns["public.example.com"] = [PUBLIC_IP]
    fake_dns["db.internal"] = ["192.168.0.10"]
    route_public_to(web)
    web.routes["/start"] = Page(status=301, headers={"Location": "http://db.internal/"})
    assert "db.internal resolves to a private-network address" in refusal("http://public.example.com/start").message


def test_connection_goes_to_the_vetted_address_even_if_dns_changes(web, fake_dns, route_public_to) -> None:
    fake_dns["rebind.example.com"] = [[PUBLIC_IP], ["127.0.0.1"], ["127.0.0.1"]]
    dialled = route_public_to(web)
    web.routes["/"] = Page("<p>public content</p>")
    result = safe_get("http://rebind.example.com/", make_ctx())
    assert result.body == b"<p>public content</p>"
    assert dialled == [(PUBLIC_IP, 80)]
    assert web.requests[0].headers["Host"] == "rebind.example.com"


@pytest.mark.parametrize(("hops", "ok"), [(5, True), (6, False)])
def test_redirect_hop_limit(web, hops: int, ok: bool) -> None:
    for number in range(hops):
        web.routes[f"/r{number}"] = Page(status=302, headers={"Location": f"/r{number + 1}"})
    web.routes[f"/r{hops}"] = Page("end", content_type="text/plain")
    if ok:
        assert safe_get(web.url("/r0"), make_ctx(allow_private=True)).url == web.url(f"/r{hops}")
    else:
        failure = refusal(web.url("/r0"), allow_private=True)
        assert failure.code == ErrorCode.UPSTREAM_ERROR
        assert "redirected more than 5 times" in failure.message


def test_redirect_loop_is_stopped(web) -> None:
    web.routes["/loop"] = Page(status=307, headers={"Location": "/loop"})
    assert "redirected more than 5 times" in refusal(web.url("/loop"), allow_private=True).message
    assert len(web.requests) == 6


# Caps -----------------------------------------------------------------------------------------


def test_declared_oversize_body_is_refused(web) -> None:
    web.routes["/big"] = Page(b"x" * (MAX_BYTES + 1), content_type="text/plain")
    failure = refusal(web.url("/big"), allow_private=True)
    assert failure.code == ErrorCode.PERMISSION_DENIED
    assert "over the 2,097,152-byte limit" in failure.message


def test_undeclared_oversize_body_is_stopped_while_streaming(web) -> None:
    web.routes["/big"] = Page(b"x" * (MAX_BYTES + 10), content_type="text/plain", send_length=False)
    assert "larger than the 2,097,152-byte limit" in refusal(web.url("/big"), allow_private=True).message


def test_compressed_body_is_capped_after_decoding(web) -> None:
    bomb = gzip.compress(b"a" * (MAX_BYTES * 3))
    web.routes["/bomb"] = Page(bomb, content_type="text/plain", headers={"Content-Encoding": "gzip"})
    assert len(bomb) < MAX_BYTES
    assert "larger than the" in refusal(web.url("/bomb"), allow_private=True).message


def test_slow_body_past_the_deadline_times_out(web) -> None:
    web.routes["/slow"] = Page(b"x" * 40, content_type="text/plain", drip_s=0.1)
    failure = refusal(web.url("/slow"), allow_private=True, seconds=0.5)
    assert failure.code == ErrorCode.TIMEOUT  # the whole body takes 4 s


@pytest.mark.parametrize("content_type", ["image/png", "application/octet-stream", "application/pdf", None])
def test_binary_content_types_are_refused(web, content_type: str | None) -> None:
    web.routes["/file"] = Page(b"\x89PNG\r\n", content_type=content_type)
    failure = refusal(web.url("/file"), allow_private=True)
    assert failure.code == ErrorCode.PERMISSION_DENIED
    assert f"the content type is {content_type or 'application/octet-stream'}" in failure.message


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (404, ErrorCode.NOT_FOUND),
        (410, ErrorCode.NOT_FOUND),
        (500, ErrorCode.UPSTREAM_ERROR),
        (403, ErrorCode.UPSTREAM_ERROR),
    ],
)
def test_error_statuses(web, status: int, code: ErrorCode) -> None:
    web.routes["/x"] = Page("nope", status=status)
    failure = refusal(web.url("/x"), allow_private=True)
    assert failure.code == code and f"HTTP {status}" in failure.message


def test_connection_refused_is_an_upstream_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert refusal(f"http://127.0.0.1:{port}/", allow_private=True).code == ErrorCode.UPSTREAM_ERROR


# Success paths against a real loopback server ---------------------------------------------


def test_fetches_a_page_following_a_relative_redirect(web) -> None:
    web.routes["/old"] = Page(status=301, headers={"Location": "/new?page=2"})
    web.routes["/new"] = Page("<h1>Caf\u00e9</h1>".encode("latin-1"), content_type="text/html; charset=ISO-8859-1")
    result = safe_get(web.url("/old"), make_ctx(allow_private=True))
    assert result.url == web.url("/new?page=2")
    assert (result.status, result.content_type, result.charset) == (200, "text/html", "ISO-8859-1")
    assert result.text() == "<h1>Caf\u00e9</h1>"
    assert [r.path for r in web.requests] == ["/old", "/new?page=2"]


def test_host_header_keeps_the_name_and_port(web) -> None:
    web.routes["/"] = Page("ok", content_type="text/plain")
    safe_get(f"http://localhost:{web.port}/", make_ctx(allow_private=True))
    assert web.requests[0].headers["Host"] == f"localhost:{web.port}"


def test_gzip_bodies_are_decoded(web) -> None:
    web.routes["/z"] = Page(
        gzip.compress(b'{"a": 1}'), content_type="application/json", headers={"Content-Encoding": "gzip"}
    )
    assert safe_get(web.url("/z"), make_ctx(allow_private=True)).body == b'{"a": 1}'
