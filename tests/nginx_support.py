"""A private nginx on loopback in front of server processes, for the multi-process tests.

The site and the main context's capacity lines are `serving.nginx_conf.site_conf` and
`main_conf`, the very text the README gives operators; this module only wraps them in a main
context that keeps everything in a temporary directory (pid, error and access logs,
request-body and proxy temp files), runs in the foreground (`daemon off`) with one worker
(so round robin is one sequence the tests can steer) that keeps this user (`user`, which
only matters under root: the default `nobody` could not enter the test's directory) and
listens on 127.0.0.1 at a port of this helper's range. nginx starts with a soft limit of
1,024 open files, as systemd starts Debian's: the worker gets more only through the
`worker_rlimit_nofile` the operators' lines set (applied by workers, not by a lone master).
Debian's nginx is installed by scripts/services/nginx.sh; without it the tests skip, or fail
under `CI=true` or `NGINX_REQUIRED=1`.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from serving.nginx_conf import DEFAULT_MAX_CONNECTIONS, main_conf, site_conf
from testing.ports import NGINX
from testing.ports import free_port as ports_free_port

PORTS = NGINX  # testing/ports.py: below the ephemeral ports, a slice per xdist worker
STOP_S = 10.0
BIND_TRIES = 3
LOST_BIND = "Address already in use"  # nginx's words (in its error log) when its port was taken
SYSTEMD_OPEN_FILES = 1024  # the soft RLIMIT_NOFILE systemd gives services, Debian's nginx included


def nginx_binary() -> str | None:
    return shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)


def nginx_required() -> bool:
    ci = os.environ.get("CI", "")
    return (ci != "" and ci.lower() not in ("0", "false")) or os.environ.get("NGINX_REQUIRED") == "1"


def require_nginx() -> str:
    """The nginx binary; skip without one, or fail under CI or NGINX_REQUIRED=1."""
    binary = nginx_binary()
    if binary is None:
        message = "nginx is not installed (scripts/services/nginx.sh installs Debian's)"
        if nginx_required():
            pytest.fail(message)
        pytest.skip(message)
    return binary


def free_port(ports: range = PORTS) -> int:
    """A port of nginx's range that nothing listens on now."""
    return ports_free_port(ports)


def private_conf(directory: Path, site: str, capacity: str | None = None) -> str:
    """A whole nginx.conf running `site` with every file it writes inside `directory`, with
    `capacity` (`main_conf`'s lines; by default for one process of the default `MAX_CONNECTIONS`)."""
    paths = {name: directory / name for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in paths.values():
        path.mkdir(exist_ok=True)
    indented = "".join(f"    {line}\n" if line else "\n" for line in site.splitlines())
    user = f"{pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name}"
    return (
        "daemon off;\n"
        "worker_processes 1;\n"
        f"user {user};\n"
        f"pid {directory / 'nginx.pid'};\n"
        f"error_log {directory / 'error.log'} info;\n"
        f"{capacity if capacity is not None else main_conf(1)}"
        "http {\n"
        f"    access_log {directory / 'access.log'};\n"
        f"    client_body_temp_path {paths['client_body']};\n"
        f"    proxy_temp_path {paths['proxy']};\n"
        f"    fastcgi_temp_path {paths['fastcgi']};\n"
        f"    uwsgi_temp_path {paths['uwsgi']};\n"
        f"    scgi_temp_path {paths['scgi']};\n"
        f"{indented}"
        "}\n"
    )


@dataclass
class Nginx:
    process: subprocess.Popen[bytes]
    port: int
    directory: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def error_log(self) -> str:
        path = self.directory / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def worker_pid(self) -> int:
        """The one worker process (the master forks it)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        assert len(children) == 1, f"nginx has workers {children}"
        return int(children[0])


def _listening(nginx: Nginx, timeout_s: float = 15.0) -> bool:
    """Wait until nginx answers on its port: True, or False when it could not bind it (taken
    since it was picked: this range lies among the kernel's ephemeral ports); fail otherwise.
    Only an answer with `X-Upstream` counts: a stranger may listen on the port it lost."""
    deadline = time.monotonic() + timeout_s
    while True:
        if LOST_BIND in nginx.error_log():
            _stop(nginx.process)
            return False
        try:
            answer = requests.get(f"{nginx.base}/health", timeout=2)
            if "X-Upstream" in answer.headers:
                return True
        except requests.RequestException:
            pass
        if nginx.process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"nginx did not start (exit {nginx.process.poll()}):\n{nginx.error_log()[-4000:]}")
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()  # fast stop: a graceful one would wait for open streams
    try:
        process.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the master and its worker (their own process group)
        process.wait()


def _start(binary: str, directory: Path, backends: Sequence[str], port: int, max_connections: int) -> Nginx | None:
    """nginx started on `port`, or None if it lost the port to another socket."""
    conf = directory / "nginx.conf"
    site = site_conf(backends, f"127.0.0.1:{port}", upstream_header=True)
    conf.write_text(private_conf(directory, site, main_conf(len(backends), max_connections)))
    (directory / "error.log").unlink(missing_ok=True)
    command = [binary, "-p", str(directory), "-e", str(directory / "error.log"), "-c", str(conf)]
    checked = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30)
    if checked.returncode != 0:
        pytest.fail(f"nginx -t refused the private conf:\n{checked.stderr}")
    # the shell lowers the soft limit and then becomes nginx (no preexec_fn: the tests run threads)
    as_systemd = ["sh", "-c", f'ulimit -S -n {SYSTEMD_OPEN_FILES} && exec "$0" "$@"', *command]
    nginx = Nginx(
        subprocess.Popen(as_systemd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True),
        port,
        directory,
    )
    try:
        return nginx if _listening(nginx) else None
    except BaseException:
        _stop(nginx.process)
        raise


@contextmanager
def running_nginx(
    directory: Path,
    backends: Sequence[str],
    port: int | None = None,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> Iterator[Nginx]:
    """nginx on 127.0.0.1:`port` (a free one of `PORTS` by default) proxying round robin to
    `backends` (`HOST:PORT` each, accepting `max_connections` each: nginx's capacity lines are
    sized for that), with the `X-Upstream` header telling which backend answered; stopped
    (SIGTERM, then SIGKILL) on exit."""
    binary = require_nginx()
    directory.mkdir(parents=True, exist_ok=True)
    nginx = None
    for _ in range(BIND_TRIES if port is None else 1):
        nginx = _start(binary, directory, backends, port or free_port(), max_connections)
        if nginx is not None:
            break
    if nginx is None:
        pytest.fail(f"nginx lost its port {BIND_TRIES} times:\n{(directory / 'error.log').read_text()[-2000:]}")
    try:
        yield nginx
    finally:
        _stop(nginx.process)
