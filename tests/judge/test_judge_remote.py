"""The judge on another Docker engine (`DOCKER_HOST=tcp://…` with TLS): runs, refusals, hardening,
clean-up, and a judge host that goes away or hangs in the middle of a run.

The other engine is a second, private `dockerd` on loopback with `--tlsverify`
(`tests/remote_docker_support.py`), started once for this module, with the judge images copied
into it from the local engine. Stopping it is a real outage: its TCP connections die and its
containers are out of reach. The judge is built the way the server builds it, from an
`EngineAddress` (the three Docker CLI variables), and the server test passes them as
environment variables. Nothing here asserts wall-clock bounds: a run that must not hang proves
it by finishing before the program it ran would have ended on its own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import requests

from api.services import services_of
from judge.engine import EngineAddress
from judge.languages import LANGUAGES
from judge.models import Limits, RunRequest, TestCase, Verdict
from judge.sandbox import OWNER_LABEL, PID_LABEL, POOL_LABEL, Sandbox
from judge.service import CONTROL_TIMEOUT_S, Judge
from testing.hostile import ROOT, server_env
from tests.judge_support import leftover_containers, require_judge
from tests.process_support import stop_process, wait_until_serving
from tests.remote_docker_support import (
    RemoteEngine,
    SshGateway,
    free_port,
    load_images,
    missing_tools,
    require,
    sshd_missing,
    start_engine,
    start_ssh_gateway,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGES = sorted({language.image for language in LANGUAGES.values()})
PYTHON = LANGUAGES["python"].image


@pytest.fixture(scope="module")
def remote() -> Iterator[RemoteEngine]:
    """The second engine, with every judge image (the judge reports itself ready only then)."""
    missing = missing_tools()
    require(not missing, f"missing {', '.join(missing)} (scripts/services/remote_docker.sh installs them)")
    local = Judge.from_env()
    require_judge(*local.available())  # the images are copied from the local engine
    local.close()
    directory = Path(tempfile.mkdtemp(prefix="rd-", dir="/tmp"))  # short: containerd's socket lives inside
    try:
        engine = start_engine(directory)
    except (RuntimeError, subprocess.CalledProcessError) as error:
        require(False, str(error))
        raise
    try:
        load_images(engine, IMAGES)
        yield engine
    finally:
        engine.stop()


def address(engine: RemoteEngine, cert_path: Path | None = None, tls_verify: str | None = "1") -> EngineAddress:
    return EngineAddress(engine.url, tls_verify, str(cert_path or engine.certs.client))


@pytest.fixture
def judge(remote: RemoteEngine) -> Iterator[Judge]:
    """A judge on the second engine; afterwards none of its containers is left there."""
    judge = Judge.from_env(address=address(remote))
    assert judge.available() == (True, "")
    yield judge
    judge.close()
    if remote.process is not None and remote.process.poll() is None:
        assert leftover_containers(judge) == []


def python_tests(judge: Judge, source: str) -> Verdict:
    cases = [
        TestCase(name="doubles", stdin="21\n", expected_stdout="42\n"),
        TestCase(name="negative", stdin="-1\n", expected_stdout="-2\n"),
    ]
    return judge.run_tests("python", {"main.py": source}, cases)


def test_a_program_and_its_tests_run_on_the_remote_engine_over_tls(judge: Judge, remote: RemoteEngine) -> None:
    assert judge.client is not None and judge.client.api.base_url == f"https://127.0.0.1:{remote.port}"
    once = judge.run(RunRequest(language="python", files={"main.py": "print(input()[::-1])"}, stdin="remote"))
    assert (once.status, once.stdout) == ("ok", "etomer\n")
    passing = python_tests(judge, "print(int(input()) * 2)\n")
    assert passing.status == "ok" and [t.passed for t in passing.tests or []] == [True, True]
    failing = python_tests(judge, "print(abs(int(input())) * 2)\n")
    assert failing.status == "wrong_answer" and [t.passed for t in failing.tests or []] == [True, False]
    assert failing.stdout == "2\n"


SECURITY_KEYS = (
    "NetworkMode",
    "ReadonlyRootfs",
    "CapDrop",
    "CapAdd",
    "SecurityOpt",
    "Privileged",
    "Init",
    "Memory",
    "MemorySwap",
    "PidsLimit",
    "NanoCpus",
    "Ulimits",
    "Tmpfs",
    "Binds",
    "Mounts",
    "Devices",
    "IpcMode",
    "PidMode",
)


def hardening(client: docker.DockerClient, box: Sandbox) -> dict[str, Any]:
    attrs = client.api.inspect_container(box.id)
    host = attrs["HostConfig"]
    return {
        **{key: host.get(key) for key in SECURITY_KEYS},
        "User": attrs["Config"]["User"],
        "NetworkDisabled": attrs["Config"].get("NetworkDisabled"),
        "Networks": sorted(attrs["NetworkSettings"]["Networks"]),
    }


def test_a_remote_sandbox_is_hardened_exactly_like_a_local_one(judge: Judge) -> None:
    assert judge.client is not None
    limits = Limits(memory_mb=128, pids=32, cpus=0.5)
    remote_box = Sandbox.start(judge.client, PYTHON, limits, owner=judge.owner)
    try:
        seen = hardening(judge.client, remote_box)
    finally:
        remote_box.destroy()
    assert seen["NetworkMode"] == "none" and seen["NetworkDisabled"] is True and seen["Networks"] in ([], ["none"])
    assert seen["ReadonlyRootfs"] is True and seen["Privileged"] is False and seen["Init"] is True
    assert seen["CapDrop"] == ["ALL"] and not seen["CapAdd"]
    assert seen["SecurityOpt"] == ["no-new-privileges"]
    assert seen["Memory"] == seen["MemorySwap"] == 128 * 1024 * 1024
    assert (seen["PidsLimit"], seen["NanoCpus"]) == (32, 500_000_000)
    assert seen["User"] == "65534:65534"
    assert not seen["Binds"] and not seen["Mounts"] and not seen["Devices"]  # nothing of the host
    assert set(seen["Tmpfs"]) == {"/work", "/tmp"}
    assert {u["Name"] for u in seen["Ulimits"]} == {"fsize", "nofile", "core"}
    local = Judge.from_env()
    if local.client is None:
        return  # the remote side is fully checked above; the comparison needs the local engine
    local_box = Sandbox.start(local.client, PYTHON, limits, owner=local.owner)
    try:
        assert hardening(local.client, local_box) == seen
    finally:
        local_box.destroy()
        local.close()


def refused(judge: Judge) -> str:
    """The judge's reason for being unavailable; a run on it is an internal error, not a crash."""
    ready, reason = judge.available()
    assert not ready and reason
    verdict = judge.run(RunRequest(language="python", files={"main.py": "print(1)"}))
    assert verdict.status == "internal_error" and verdict.stderr
    return reason


def test_a_client_certificate_of_another_ca_is_refused_with_a_clear_reason(remote: RemoteEngine) -> None:
    reason = refused(Judge.from_env(address=address(remote, remote.certs.stranger)))
    assert f"Docker engine {remote.url} unreachable" in reason
    assert "SSL" in reason or "certificate" in reason


def test_a_missing_client_certificate_is_refused_with_a_clear_reason(remote: RemoteEngine, tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes((remote.certs.client / "ca.pem").read_bytes())  # the CA, no cert.pem
    reason = refused(Judge.from_env(address=address(remote, tmp_path)))
    assert "bad TLS settings" in reason and "cert.pem" in reason


def test_plain_tcp_without_tls_is_refused(remote: RemoteEngine) -> None:
    reason = refused(Judge.from_env(address=EngineAddress(remote.url)))
    assert "without TLS is refused" in reason and "DOCKER_TLS_VERIFY" in reason


def test_the_app_reports_a_refused_remote_engine_in_health(make_app: Callable[..., Any], remote: RemoteEngine) -> None:
    app = make_app(
        judge_enabled=True,
        docker_host=remote.url,
        docker_tls_verify="1",
        docker_cert_path=str(remote.certs.stranger),
    )
    judge = app.test_client().get("/health").get_json()["judge"]
    assert judge["available"] is False and remote.url in judge["reason"]
    assert services_of(app).judge is not None  # a remote judge is kept: it connects once the host answers


@pytest.fixture(scope="module")
def gateway(remote: RemoteEngine) -> Iterator[SshGateway]:
    """`ssh://root@127.0.0.1:PORT`: a private sshd whose sessions reach the second engine."""
    missing = sshd_missing()
    require(not missing, f"missing {', '.join(missing)} (scripts/services/remote_docker.sh, requirements.txt)")
    gateway = start_ssh_gateway(Path(tempfile.mkdtemp(prefix="rs-", dir="/tmp")), remote)
    yield gateway
    gateway.stop()


def test_an_ssh_docker_host_runs_the_judge_on_the_remote_engine(
    gateway: SshGateway, remote: RemoteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(gateway.home))  # paramiko reads the key and known_hosts from ~/.ssh
    judge = Judge.from_env(address=EngineAddress(gateway.url))
    engine = remote.client()
    try:
        assert judge.available() == (True, "")
        failing = python_tests(judge, "print(abs(int(input())) * 2)\n")
        assert failing.status == "wrong_answer" and [t.passed for t in failing.tests or []] == [True, False]
        assert judge.client is not None
        box = Sandbox.start(judge.client, PYTHON, Limits(), owner=judge.owner, cleanup=judge.cleanup)
        try:
            assert engine.containers.get(box.id).labels[OWNER_LABEL] == judge.owner  # on the second engine
        finally:
            box.destroy()
    finally:
        judge.close()
    assert engine.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={judge.owner}"}) == []
    engine.close()


def test_an_ssh_host_missing_from_known_hosts_is_refused_with_a_clear_reason(
    gateway: SshGateway, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".ssh").mkdir()
    shutil.copy(gateway.home / ".ssh" / "id_ed25519", tmp_path / ".ssh" / "id_ed25519")  # the key, no known_hosts
    monkeypatch.setenv("HOME", str(tmp_path))
    reason = refused(Judge.from_env(address=EngineAddress(gateway.url)))
    assert gateway.url in reason and "known_hosts" in reason


def start_run(judge: Judge, source: str, limits: Limits) -> tuple[threading.Thread, list[Verdict]]:
    verdicts: list[Verdict] = []
    request = RunRequest(language="python", files={"main.py": source}, limits=limits)
    runner = threading.Thread(target=lambda: verdicts.append(judge.run(request)), daemon=True)
    runner.start()
    return runner, verdicts


def wait_running(judge: Judge) -> None:
    """Until the run's container runs on the engine and its program has had time to start."""
    assert judge.client is not None
    deadline = time.monotonic() + 60
    label = {"label": f"{OWNER_LABEL}={judge.owner}", "status": "running"}
    while not judge.client.containers.list(filters=label):
        if time.monotonic() > deadline:
            pytest.fail("the run's container never ran")
        time.sleep(0.1)
    time.sleep(1.0)  # the program is sleeping now


SLEEPER = "import time\nprint('started', flush=True)\ntime.sleep({seconds})\nprint('finished')\n"


def test_the_judge_host_going_away_mid_run_ends_the_run_with_a_clear_verdict(
    judge: Judge, remote: RemoteEngine
) -> None:
    program_s = 45
    runner, verdicts = start_run(judge, SLEEPER.format(seconds=program_s), Limits(wall_s=60))
    wait_running(judge)
    remote.kill()
    runner.join(program_s - 5)  # the program alone would still be sleeping
    assert not runner.is_alive() and len(verdicts) == 1
    verdict = verdicts[0]
    assert verdict.status == "internal_error" and "went away" in verdict.stderr
    ready, reason = judge.available()
    assert not ready and f"Docker engine {remote.url} unreachable" in reason
    assert judge.run(RunRequest(language="python", files={"main.py": "print(1)"})).status == "internal_error"
    assert judge.cleanup is not None and len(judge.cleanup.owed()) == 1  # the run's container

    remote.start()  # the host boots again: its containers of before are stopped ones now
    assert judge.available() == (True, "")  # seen at once, and the outage's leftovers are swept
    assert leftover_containers(judge) == []
    again = judge.run(RunRequest(language="python", files={"main.py": "print('back')"}))
    assert (again.status, again.stdout) == ("ok", "back\n")


def test_a_pooled_judge_runs_again_after_the_host_reboots(remote: RemoteEngine) -> None:
    judge = Judge.from_env(address=address(remote), pool_size=1)
    try:
        assert judge.pool is not None and judge.pool.wait_full(60)
        remote.kill()  # every pooled sandbox dies with the host
        remote.start()
        deadline = time.monotonic() + 60
        while not judge.available()[0]:
            if time.monotonic() > deadline:
                pytest.fail(f"the engine never answered again: {judge.available()[1]}")
            time.sleep(0.5)
        verdict = judge.run(RunRequest(language="python", files={"main.py": "print('again')"}))
        assert (verdict.status, verdict.stdout) == ("ok", "again\n")  # a dead pooled sandbox is swapped
    finally:
        judge.close()
    assert leftover_containers(judge) == []


def test_a_hung_judge_host_ends_the_run_at_its_deadline_plus_the_control_timeout(
    judge: Judge, remote: RemoteEngine
) -> None:
    program_s = 60
    wall_s = 3
    assert wall_s + 2 * CONTROL_TIMEOUT_S < program_s - 10  # the join below proves the bound
    runner, verdicts = start_run(judge, SLEEPER.format(seconds=program_s), Limits(wall_s=wall_s))
    wait_running(judge)
    remote.freeze()
    try:
        runner.join(program_s - 10)
        assert not runner.is_alive() and len(verdicts) == 1
    finally:
        remote.thaw()
    verdict = verdicts[0]
    assert verdict.status == "internal_error" and "did not answer" in verdict.stderr
    assert judge.cleanup is not None and len(judge.cleanup.owed()) == 1  # it may still run the program
    assert judge.available() == (True, "")  # the engine answers again: the owed removal is done
    assert judge.cleanup.owed() == [] and leftover_containers(judge) == []


def test_a_judge_host_down_at_start_is_used_once_it_answers(remote: RemoteEngine) -> None:
    remote.kill()
    try:
        judge = Judge.from_env(address=address(remote), pool_size=1)
        assert judge.client is None and judge.pool is None
        ready, reason = judge.available()
        assert not ready and f"Docker engine {remote.url} unreachable" in reason
    finally:
        remote.start()
    try:
        deadline = time.monotonic() + 60  # it tries again every RECONNECT_EVERY_S
        while not judge.available()[0]:
            if time.monotonic() > deadline:
                pytest.fail(f"the judge never connected: {judge.available()[1]}")
            time.sleep(0.5)
        assert judge.client is not None and judge.pool is not None  # the pool starts with the connection
        verdict = judge.run(RunRequest(language="python", files={"main.py": "print('up')"}))
        assert (verdict.status, verdict.stdout) == ("ok", "up\n")
    finally:
        judge.close()
    assert leftover_containers(judge) == []


def containers_of(engine: docker.DockerClient, pid: int) -> list[Any]:
    return list(engine.containers.list(all=True, filters={"label": f"{PID_LABEL}={pid}"}))


def test_a_server_with_a_remote_judge_runs_code_there_and_leaves_nothing_after_a_stop(
    remote: RemoteEngine, tmp_path: Path
) -> None:
    port = free_port()
    env = server_env(
        tmp_path,
        port,
        {
            **remote.env(),
            "JUDGE_ENABLED": "1",
            "JUDGE_POOL_SIZE": "1",
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": "http://127.0.0.1:9/v1",
            "RATE_LIMITS": "runs=off",
        },
    )
    engine = remote.client()
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_serving(process, f"{base}/health", tmp_path / "server.log", timeout_s=60)
        health = requests.get(f"{base}/health", timeout=10).json()["judge"]
        assert health["available"] is True, health
        deadline = time.monotonic() + 60
        while len(containers_of(engine, process.pid)) < len(IMAGES) and time.monotonic() < deadline:
            time.sleep(0.2)
        pool = containers_of(engine, process.pid)
        assert len(pool) == len(IMAGES) and all(c.labels[POOL_LABEL] == "1" for c in pool)  # on the remote
        token = (tmp_path / "admin.token").read_text().strip()
        body = {"language": "python", "files": {"main.py": "import socket\nprint(socket.gethostname())"}}
        answer = requests.post(f"{base}/run", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert answer.status_code == 200 and answer.json()["stdout"] == "judge\n", answer.text
        process.terminate()
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            stop_process(process)
        log.close()
    assert containers_of(engine, process.pid) == []
    engine.close()
