"""The nginx site that puts several server processes behind one address (SPEC 13).

One template for two readers: the README's example for operators is this function's output
(tests/serving/test_nginx_conf.py checks that they are the same text), and the multi-process tests
run a private nginx on exactly this site (tests/nginx_support.py wraps it in a main context
with its own pid, logs and temp paths). So what the tests prove is what operators deploy.

What an event stream needs from a proxy: no response buffering (each `answer.delta` must
reach the browser when the process writes it; the app also sends `X-Accel-Buffering: no`),
HTTP/1.1 to the upstream with an empty `Connection` header (kept-alive upstream connections),
and a read timeout longer than any silence (heartbeats come every 15 s, but a JSON
`POST /chat` waits silently for its whole turn). Requests go round robin: with `REDIS_URL`
any process can serve any request, so there is no stickiness to configure. A POST that could
not be sent to a dead process goes to the next one (nginx retries only requests it has not
sent, so a turn is never started twice). nginx passes the client's address and scheme in
`X-Forwarded-For` and `X-Forwarded-Proto`; the processes believe them only with nginx's
address in `TRUSTED_PROXIES` (tests/cluster_support.py sets it, as the README tells operators).

Capacity: each connection nginx proxies costs it two (the client's and the one to a process),
and an nginx worker drops every new connection past `worker_connections`, `POST /sessions`
included; Debian's nginx.conf allows 768 a worker, about 380 open streams. So `main_conf`
sizes `worker_connections` and `worker_rlimit_nofile` (each connection is a file descriptor;
systemd starts nginx with a soft limit of 1,024) for every process accepting `MAX_CONNECTIONS`,
all through one worker at worst: nginx does not promise to spread long-lived connections
evenly over its workers. Past that, the processes answer 503 (`MAX_CONNECTIONS`) while nginx
still has room to pass the answer on. Those lines belong to nginx.conf's main context, not to
the site (which goes inside `http { }`), hence two outputs.

Usage: python -m serving.nginx_conf [--listen 80] [--max-connections N] [--main] HOST:PORT [HOST:PORT ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from config.settings import Settings

UPSTREAM = "orchestrator"
# the app's largest accepted body (app.MAX_REQUEST_BYTES, uploads); a test keeps them equal
MAX_BODY_MB = 48
# longer than any turn a JSON `POST /chat` may wait for (LLM_TIMEOUT_S, tool deadlines, fallbacks)
READ_TIMEOUT_S = 3600
EXAMPLE_BACKENDS = ("127.0.0.1:5001", "127.0.0.1:5002")
DEFAULT_MAX_CONNECTIONS: int = Settings.model_fields["max_connections"].default
# connections and descriptors beyond the proxied ones: the listening socket, the idle kept-alive
# upstream connections (`keepalive 32`), logs, connections still closing
MARGIN = 1024


def worker_connections(processes: int, max_connections: int) -> int:
    """Two per connection any of the `processes` may hold (the client's and the upstream one)."""
    return 2 * processes * max_connections + MARGIN


def worker_open_files(processes: int, max_connections: int) -> int:
    """A descriptor per connection, plus a temporary file per client whose request body nginx
    buffers to disk (an upload larger than `client_body_buffer_size`)."""
    return worker_connections(processes, max_connections) + processes * max_connections + MARGIN


def main_conf(processes: int, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> str:
    """The lines of nginx.conf's main context (outside `http { }`) that let one nginx worker
    carry as many connections as `processes` processes accept (`MAX_CONNECTIONS` each)."""
    if processes < 1 or max_connections < 1:
        raise ValueError("at least one process and one connection")
    return (
        f"# {processes} x MAX_CONNECTIONS={max_connections}, two nginx connections each\n"
        f"worker_rlimit_nofile {worker_open_files(processes, max_connections)};\n"
        "\n"
        "events {\n"
        f"    worker_connections {worker_connections(processes, max_connections)};\n"
        "}\n"
    )


def site_conf(backends: Sequence[str], listen: str = "80", *, upstream_header: bool = False) -> str:
    """The `upstream` and `server` blocks (they go inside nginx's `http { }`) for `backends`,
    each `HOST:PORT` of one server process. `upstream_header` adds `X-Upstream` (which process
    answered) to every response: for tests and debugging, not for the public."""
    if not backends:
        raise ValueError("at least one backend HOST:PORT")
    servers = "".join(f"    server {backend};\n" for backend in backends)
    debug = "        add_header X-Upstream $upstream_addr always;\n" if upstream_header else ""
    return (
        f"upstream {UPSTREAM} {{\n"
        f"{servers}"
        "    keepalive 32;\n"
        "}\n"
        "\n"
        "server {\n"
        f"    listen {listen};\n"
        f"    client_max_body_size {MAX_BODY_MB}m;\n"
        "\n"
        "    location / {\n"
        f"        proxy_pass http://{UPSTREAM};\n"
        "        proxy_http_version 1.1;\n"
        '        proxy_set_header Connection "";\n'
        "        proxy_set_header Host $host;\n"
        "        proxy_set_header X-Forwarded-For $remote_addr;\n"
        "        proxy_set_header X-Forwarded-Proto $scheme;\n"
        "        proxy_buffering off;\n"
        "        proxy_cache off;\n"
        f"        proxy_read_timeout {READ_TIMEOUT_S}s;\n"
        f"        proxy_send_timeout {READ_TIMEOUT_S}s;\n"
        f"{debug}"
        "    }\n"
        "}\n"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print the nginx site for several server processes.")
    parser.add_argument("--listen", default="80", help="nginx's `listen` value, e.g. 80 or 127.0.0.1:8080")
    parser.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="the processes' MAX_CONNECTIONS (default: the setting's default)",
    )
    parser.add_argument(
        "--main", action="store_true", help="print nginx.conf's main-context lines (events, open files) instead"
    )
    parser.add_argument("backends", nargs="+", metavar="HOST:PORT", help="one per server process")
    args = parser.parse_args(argv)
    if args.main:
        print(main_conf(len(args.backends), args.max_connections), end="")
    else:
        print(site_conf(args.backends, args.listen), end="")


if __name__ == "__main__":
    main()
