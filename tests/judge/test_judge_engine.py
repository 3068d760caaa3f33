"""How the judge reaches its engine (`judge/engine.py`) and what it owes an engine that went away
(`judge/cleanup.py`), without any engine: every failure here is a real refused connection.

The runs on a real second engine are in `tests/judge/test_judge_remote.py`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import docker
import pytest
from docker.constants import DEFAULT_DOCKER_API_VERSION

from judge.cleanup import Cleanup
from judge.engine import EngineAddress, EngineUnavailable, _api_version, connect
from judge.service import Judge
from tests.remote_docker_support import free_port, make_certs, require


def test_the_address_is_the_docker_cli_variables() -> None:
    environ = {"DOCKER_HOST": "tcp://judge:2376", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": "/certs", "X": "y"}
    address = EngineAddress.from_environ(environ)
    assert address.environment() == {k: v for k, v in environ.items() if k != "X"}
    assert address.remote and address.describe() == "tcp://judge:2376"
    local = EngineAddress.from_environ({"DOCKER_HOST": ""})
    assert local.environment() == {} and not local.remote and local.describe() == "the local engine"
    assert not EngineAddress("unix:///var/run/docker.sock").remote
    assert EngineAddress("ssh://judge@judge-host").remote


def test_plain_tcp_is_refused_before_any_connection() -> None:
    with pytest.raises(EngineUnavailable, match="without TLS is refused"):
        connect(EngineAddress(f"tcp://127.0.0.1:{free_port()}"), 5)


@pytest.mark.parametrize(
    ("present", "tls_verify", "missing"),
    [
        ((), "1", "ca.pem, cert.pem, key.pem"),
        (("ca.pem",), "1", "cert.pem, key.pem"),
        (("ca.pem", "cert.pem"), "1", "key.pem"),
        (("cert.pem",), None, "key.pem"),  # no verification: the CA is not needed
    ],
)
def test_missing_certificate_files_are_named(
    tmp_path: Path, present: tuple[str, ...], tls_verify: str | None, missing: str
) -> None:
    for name in present:
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n", encoding="utf-8")
    address = EngineAddress("tcp://127.0.0.1:2376", tls_verify, str(tmp_path))
    with pytest.raises(EngineUnavailable, match=f"lacks {missing}$"):
        connect(address, 5)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(shutil.which("openssl") is not None, "openssl is missing (scripts/services/remote_docker.sh installs it)")
    return make_certs(tmp_path_factory.mktemp("certs")).client


def test_a_tls_engine_nobody_answers_is_unreachable_with_its_address(certs: Path) -> None:
    url = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(EngineUnavailable, match=f"Docker engine {url} unreachable: .*refused"):
        connect(EngineAddress(url, "1", str(certs)), 5)
    judge = Judge.from_env(address=EngineAddress(url, "1", str(certs)))  # never raises
    ready, reason = judge.available()
    assert not ready and url in reason


@pytest.mark.parametrize(
    ("engine", "expected"),
    [("1.41", "1.41"), ("1.9", "1.9"), ("99.0", DEFAULT_DOCKER_API_VERSION), ("", DEFAULT_DOCKER_API_VERSION)],
)
def test_the_api_version_is_the_engines_capped_at_the_sdks(engine: str, expected: str) -> None:
    assert _api_version(engine) == expected


def test_removals_an_engine_could_not_be_asked_for_are_owed_until_it_answers(tmp_path: Path) -> None:
    gone = docker.DockerClient(base_url=f"unix://{tmp_path}/docker.sock", version="1.41", timeout=5)
    cleanup = Cleanup(gone)
    assert cleanup.kill("abc") is False  # the container may still run there
    assert cleanup.remove("abc") is False and cleanup.remove("def") is False
    assert cleanup.owed() == ["abc", "def"]
    assert cleanup.retry() == 0 and cleanup.owed() == ["abc", "def"]  # still away: nothing is dropped
    with pytest.raises(OSError):
        cleanup.oom_killed("abc")  # the caller reports the engine gone
    gone.close()
