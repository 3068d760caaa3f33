"""An SSRF-safe HTTP GET for tools that fetch URLs a model chose (`/open_url`, later others).

Why each rule exists:
- Only http/https: other schemes (file, ftp, gopher…) reach local files or speak to
  internal services in ways a page fetch never needs.
- We resolve the host ourselves and refuse when ANY resolved address is not public
  (loopback, private, link-local, CGNAT, multicast, reserved, unspecified, the IPv4-mapped,
  6to4, Teredo and NAT64 forms of those, cloud metadata). Decisions come from `ipaddress`
  on the resolved addresses, never from keyword lists on the URL text, so decimal, octal,
  hex and userinfo spellings of an address are judged by what they resolve to.
- We then connect to the vetted address itself (a urllib3 pool whose host is the IP, with
  the original Host header, SNI and certificate hostname), so a DNS rebind between check and
  connect cannot switch the target. Environment proxies are not used for the same reason.
- Redirects are followed by hand (at most `MAX_REDIRECTS`), each hop checked again.
- The body is read in a streaming loop: decoded size is capped (a gzip bomb stops at the
  cap), the content type must be readable text, and every blocking step gets the time left
  before the tool's deadline (`ctx.remaining()`).

`settings.allow_private_fetch` (ALLOW_PRIVATE_FETCH=1) lets loopback/private/CGNAT addresses
through for local development and tests; metadata, link-local, multicast, unspecified and
reserved addresses stay refused even then.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import certifi
import urllib3
from requests.utils import requote_uri
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

from tools.base import ErrorCode, ToolContext, ToolFailure

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_BYTES = 2 * 1024 * 1024
MAX_REDIRECTS = 5
CHUNK_BYTES = 64 * 1024
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
TEXT_TYPES = frozenset(
    {
        "application/xhtml+xml",
        "application/json",
        "application/ld+json",
        "application/xml",
        "application/rss+xml",
        "application/atom+xml",
        "application/javascript",
    }
)
USER_AGENT = "Mozilla/5.0 (compatible; chat-orchestrator/1.0; +open_url)"
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})
CGNAT = ipaddress.ip_network("100.64.0.0/10")
NAT64_PREFIXES = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


@dataclass(frozen=True)
class FetchResult:
    """A successful (2xx) response, fully read and within the caps."""

    url: str  # the final URL, after redirects
    status: int
    content_type: str  # lower-case media type without parameters, e.g. "text/html"
    charset: str | None
    body: bytes

    def text(self) -> str:
        """The body decoded with the declared charset (UTF-8 when none or unknown)."""
        try:
            return self.body.decode(self.charset or "utf-8", errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 transition form carries, named by form."""
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    if ip.teredo is not None:
        return "Teredo", ip.teredo[1]
    for prefix in NAT64_PREFIXES:
        if ip in prefix:
            return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_problem(ip: IPAddress, *, allow_private: bool = False) -> str | None:
    """Why `ip` must not be fetched (a short phrase), or None when it is allowed."""
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            form, inner = embedded
            inner_problem = address_problem(inner, allow_private=allow_private)
            return None if inner_problem is None else f"the {form} form of {inner_problem}"
    for flag, phrase in (
        ("is_unspecified", "the unspecified address"),
        ("is_multicast", "a multicast address"),
        ("is_link_local", "a link-local address"),
    ):
        if getattr(ip, flag):
            return phrase
    if ip.is_loopback:
        problem: str | None = "a loopback address"
    elif ip in CGNAT:
        problem = "a shared (CGNAT) address"
    elif ip.is_reserved:
        return "a reserved address"
    elif ip.is_private:
        problem = "a private-network address"
    elif not ip.is_global:
        problem = "a non-public address"
    else:
        return None
    return None if allow_private else problem


def _deny(message: str) -> ToolFailure:
    return ToolFailure(ErrorCode.PERMISSION_DENIED, message)


def resolve(host: str, port: int, ctx: ToolContext) -> list[IPAddress]:
    """All addresses `host` resolves to, bounded by the deadline (getaddrinfo has no timeout)."""
    outcome: dict[str, Any] = {}

    def lookup() -> None:
        try:
            outcome["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as error:
            outcome["error"] = error

    worker = threading.Thread(target=lookup, name=f"resolve-{host}", daemon=True)
    worker.start()
    worker.join(ctx.remaining())
    if worker.is_alive():
        raise ToolFailure(ErrorCode.TIMEOUT, f"looking up the host {host} took too long; try again later.")
    if "error" in outcome or not outcome.get("infos"):
        raise ToolFailure(ErrorCode.NOT_FOUND, f"the host {host} could not be resolved; check the URL.")
    addresses: list[IPAddress] = []
    for info in outcome["infos"]:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


@dataclass(frozen=True)
class _Target:
    scheme: str
    host: str  # IDNA/ASCII host name, or the IP literal without brackets
    port: int
    path: str  # path + query, what goes on the request line

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def _parse(url: str) -> _Target:
    try:
        parts = urlsplit(requote_uri(url.strip()))
        port = parts.port
    except ValueError as error:
        raise ToolFailure(ErrorCode.VALIDATION_FAILED, f"{url!r} is not a valid URL ({error}).") from error
    scheme = parts.scheme.lower()
    if scheme not in {"http", "https"}:
        shown = f"{scheme}://" if scheme else "a URL without a scheme"
        raise _deny(f"only http:// and https:// URLs can be fetched, not {shown}.")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise ToolFailure(ErrorCode.VALIDATION_FAILED, f"{url!r} has no host name; give a full http(s) URL.")
    try:
        host = host.encode("idna").decode("ascii")
    except UnicodeError:
        pass  # IP literals and already-ASCII names; resolution decides the rest
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return _Target(scheme, host, port or (443 if scheme == "https" else 80), path)


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _vetted_addresses(target: _Target, ctx: ToolContext) -> list[IPAddress]:
    addresses = resolve(target.host, target.port, ctx)
    allow_private = bool(getattr(ctx.settings, "allow_private_fetch", False))
    for address in addresses:
        problem = address_problem(address, allow_private=allow_private)
        if problem is not None:
            verb = "is" if is_ip_literal(target.host) else "resolves to"
            raise _deny(f"{target.host} {verb} {problem}; only public internet addresses can be fetched.")
    return addresses


def _pool(target: _Target, address: IPAddress, ctx: ToolContext) -> urllib3.HTTPConnectionPool:
    """A one-connection pool to the vetted IP; TLS still checks the certificate for the name."""
    timeout = urllib3.Timeout(connect=ctx.remaining(), read=ctx.remaining())
    if target.scheme == "https":
        return urllib3.HTTPSConnectionPool(
            str(address),
            target.port,
            timeout=timeout,
            retries=False,
            maxsize=1,
            server_hostname=target.host,
            assert_hostname=target.host,
            cert_reqs="CERT_REQUIRED",
            ca_certs=certifi.where(),
        )
    return urllib3.HTTPConnectionPool(str(address), target.port, timeout=timeout, retries=False, maxsize=1)


def _open(target: _Target, ctx: ToolContext) -> tuple[urllib3.HTTPConnectionPool, urllib3.BaseHTTPResponse]:
    """Send the GET to the first vetted address that accepts a connection."""
    headers = {
        "Host": target.host_header,
        "User-Agent": USER_AGENT,
        "Accept-Encoding": "gzip, deflate",
        "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.5",
    }
    last_error: Exception | None = None
    for address in _vetted_addresses(target, ctx):
        pool = _pool(target, address, ctx)
        try:
            response = pool.urlopen(
                "GET",
                target.path,
                headers=headers,
                redirect=False,
                retries=False,
                preload_content=False,
                assert_same_host=False,
                release_conn=False,
            )
            return pool, response
        except NewConnectionError as error:  # refused/unreachable: try the next vetted address
            pool.close()
            last_error = error
        except BaseException:
            pool.close()
            raise
    raise ToolFailure(ErrorCode.UPSTREAM_ERROR, f"could not connect to {target.host}: {last_error}; try again later.")


def _media_type(header: str | None) -> tuple[str, str | None]:
    if not header:
        return "application/octet-stream", None
    media, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return media.strip().lower(), charset


def is_text_type(media_type: str) -> bool:
    return media_type.startswith("text/") or media_type in TEXT_TYPES or media_type.endswith(("+json", "+xml"))


def _read_capped(response: urllib3.BaseHTTPResponse, ctx: ToolContext, max_bytes: int) -> bytes:
    """Read the decoded body in chunks; refuse past the cap, stop at the deadline."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _deny(f"the response is {int(declared):,} bytes, over the {max_bytes:,}-byte limit.")
    chunks: list[bytes] = []
    size = 0
    while True:
        connection = getattr(response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            sock.settimeout(ctx.remaining())  # each wait ends at the deadline, not after it
        chunk = response.read1(CHUNK_BYTES, decode_content=True)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise _deny(f"the response is larger than the {max_bytes:,}-byte limit.")
        chunks.append(chunk)
        ctx.remaining()


def _status_failure(status: int, url: str) -> ToolFailure:
    if status in {404, 410}:
        return ToolFailure(ErrorCode.NOT_FOUND, f"{url} answered HTTP {status} (no such page); check the URL.")
    return ToolFailure(ErrorCode.UPSTREAM_ERROR, f"{url} answered HTTP {status}; try again later or another URL.")


def safe_get(
    url: str,
    ctx: ToolContext,
    *,
    max_bytes: int = MAX_BYTES,
    max_redirects: int = MAX_REDIRECTS,
    accept_text_only: bool = True,
) -> FetchResult:
    """GET `url` under the SSRF rules above; raise `ToolFailure` for every refusal or failure."""
    current = url
    for _hop in range(max_redirects + 1):
        target = _parse(current)
        try:
            pool, response = _open(target, ctx)
            try:
                if response.status in REDIRECT_STATUSES and response.headers.get("Location"):
                    current = urljoin(current, response.headers["Location"])
                    continue
                if response.status >= 400 or response.status < 200:
                    raise _status_failure(response.status, current)
                media_type, charset = _media_type(response.headers.get("Content-Type"))
                if accept_text_only and not is_text_type(media_type):
                    raise _deny(f"the content type is {media_type}, which is not readable text (HTML, text or JSON).")
                body = _read_capped(response, ctx, max_bytes)
                return FetchResult(current, response.status, media_type, charset, body)
            finally:
                response.release_conn()
                pool.close()
        except (TimeoutError, Urllib3Timeout) as error:
            raise ToolFailure(ErrorCode.TIMEOUT, f"{target.host} did not answer in time; try again later.") from error
        except (Urllib3Error, OSError) as error:
            raise ToolFailure(
                ErrorCode.UPSTREAM_ERROR, f"fetching {current} failed ({type(error).__name__}); try again later."
            ) from error
    raise ToolFailure(
        ErrorCode.UPSTREAM_ERROR, f"{url} redirected more than {max_redirects} times; give the final URL instead."
    )
