"""The nginx site for several processes (`serving/nginx_conf.py`): the README shows operators
exactly what the multi-process tests run, and nginx itself accepts it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import app
from serving.nginx_conf import (
    DEFAULT_MAX_CONNECTIONS,
    EXAMPLE_BACKENDS,
    MAX_BODY_MB,
    main_conf,
    site_conf,
    worker_connections,
    worker_open_files,
)
from tests.nginx_support import private_conf, require_nginx

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Running on several machines"


def readme_nginx_blocks() -> list[str]:
    """The ```nginx blocks of the README's "Running on several machines" section."""
    text = (ROOT / "README.md").read_text()
    assert SECTION in text, f"README has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    return re.findall(r"```nginx\n(.*?)```", section, flags=re.DOTALL)


def test_the_readme_example_is_the_site_the_tests_run():
    assert readme_nginx_blocks() == [main_conf(len(EXAMPLE_BACKENDS)), site_conf(EXAMPLE_BACKENDS, "80")]


def test_the_command_prints_the_same_site():
    printed = subprocess.run(
        [sys.executable, "-m", "serving.nginx_conf", "--listen", "8080", "10.0.0.5:5000", "10.0.0.6:5000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert printed == site_conf(["10.0.0.5:5000", "10.0.0.6:5000"], "8080")


def test_the_command_prints_the_capacity_lines_for_the_processes_max_connections():
    printed = subprocess.run(
        [sys.executable, "-m", "serving.nginx_conf", "--main", "--max-connections", "3000", "a:1", "b:1", "c:1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert printed == main_conf(3, 3000)
    assert "worker_connections 19024;" in printed  # 3 processes x 3,000 connections x 2, and the margin
    assert "worker_rlimit_nofile 29048;" in printed


@pytest.mark.parametrize("processes, max_connections", [(1, 10), (1, 5_200), (2, DEFAULT_MAX_CONNECTIONS), (8, 2_000)])
def test_one_worker_carries_two_connections_for_each_a_process_accepts(processes: int, max_connections: int):
    """Each proxied connection is two for nginx (client and process), all possibly on one worker;
    each is a descriptor, and an upload buffered to disk adds a temporary file per client."""
    streams = processes * max_connections
    assert worker_connections(processes, max_connections) > 2 * streams
    assert worker_open_files(processes, max_connections) > worker_connections(processes, max_connections) + streams
    lines = main_conf(processes, max_connections)
    assert f"worker_connections {worker_connections(processes, max_connections)};" in lines
    assert f"worker_rlimit_nofile {worker_open_files(processes, max_connections)};" in lines


def test_the_site_carries_what_event_streams_need():
    site = site_conf(EXAMPLE_BACKENDS)
    for directive in (
        "proxy_buffering off;",
        "proxy_http_version 1.1;",
        'proxy_set_header Connection "";',
        "proxy_read_timeout 3600s;",
        "proxy_set_header X-Forwarded-For $remote_addr;",
    ):
        assert directive in site
    assert "X-Upstream" not in site  # which process answered is for tests, not the public
    assert "server 127.0.0.1:5001;\n    server 127.0.0.1:5002;" in site


def test_nginx_takes_bodies_as_large_as_the_app():
    assert MAX_BODY_MB * 1024 * 1024 == app.MAX_REQUEST_BYTES


def test_nginx_accepts_the_site_and_its_capacity_lines(tmp_path):
    binary = require_nginx()
    conf = tmp_path / "nginx.conf"
    site = site_conf(EXAMPLE_BACKENDS, "127.0.0.1:47999")
    conf.write_text(private_conf(tmp_path, site, main_conf(len(EXAMPLE_BACKENDS))))
    checked = subprocess.run(
        [binary, "-t", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert checked.returncode == 0, checked.stderr
