"""What does the judge add on top of running a program? (issue: Docker judge, Speed)

In one run, for a trivial python program (`print(sum(range(10)))`):
  bare     `/usr/bin/python3 main.py` as a host subprocess (Debian's python, as in the image)
  docker   plain `docker run --rm` of the judge's python image (the same program)
  judge    `POST /run` through the real server (uvicorn), with the pre-started pool
           (JUDGE_POOL_SIZE, default 2) and again with no pool
and a 10-test python problem through `POST /submit`. p50/p95 latency with 1 client, and
runs per second with 1 and 4 parallel clients. Needs Docker and the judge images
(`make judge-images`).

The pooled `/run` is timed twice: paced (one run every `--pace` seconds, long enough for
the pool to replace the container a run used: interactive use) and back to back (runs
arrive faster than containers start, so some find the pool empty: saturation).

    .venv/bin/python bench/judge_overhead.py [--runs 40] [--pool 2] [--pace 0.5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import NO_USER_LIMITS, free_port, percentile, timed  # noqa: E402
from judge.languages import LANGUAGES  # noqa: E402
from storage.db import Database  # noqa: E402
from storage.problems import add_problem  # noqa: E402
from storage.users import create_user  # noqa: E402

PROGRAM = "print(sum(range(10)))\n"
HOST_PYTHON = "/usr/bin/python3"  # Debian's, as in the judge image (a pyenv shim adds ~100 ms)
SOLUTION = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"
TESTS = [
    {
        "name": f"t{i}",
        "stdin": " ".join(map(str, range(i))) + "\n",
        "expected_stdout": f"{sum(range(i))}\n",
        "compare": "trimmed",
    }
    for i in range(10)
]


def throughput(call: Callable[[], object], clients: int, total: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda _: call(), range(total)))
    return total / (time.perf_counter() - start)


class Server:
    """The product in a subprocess with its own database, a user and one stored problem."""

    def __init__(self, tmp: Path, pool: int) -> None:
        self.database = Database(tmp / f"judge-{pool}.db")
        self.database.migrate()
        with self.database.connection() as conn:
            user, self.token = create_user(conn, "bench")
            self.problem_id = add_problem(
                conn,
                user_id=user.id,
                activity_id=None,
                language="python",
                difficulty="easy",
                title="Sum",
                statement="Sum the integers.",
                starter_files={"main.py": ""},
                reference_files={"main.py": SOLUTION},
                tests=TESTS,
            ).id
        self.port = free_port()
        env = {
            **os.environ,
            "PORT": str(self.port),
            "DATABASE_PATH": self.database.path,
            "DATA_DIR": str(tmp),
            "AUTH_TOKEN_FILE": str(tmp / "admin.token"),
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": "http://127.0.0.1:9/v1",
            "JUDGE_ENABLED": "1",
            "JUDGE_POOL_SIZE": str(pool),
            **NO_USER_LIMITS,
        }
        self.process = subprocess.Popen(
            [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {self.token}"
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(300):
            try:
                if self.http.get(f"{self.base}/health", timeout=2).json()["judge"]["available"]:
                    break
            except (requests.ConnectionError, KeyError, ValueError):
                pass
            time.sleep(0.1)
        else:
            raise SystemExit("the server or its judge did not come up")
        time.sleep(3 if pool else 0)  # let the pool fill

    def paced_run(self, pace_s: float) -> float:
        """One run after `pace_s` of quiet; returns its latency in ms (the wait is not timed)."""
        time.sleep(pace_s)
        started = time.perf_counter()
        self.run()
        return (time.perf_counter() - started) * 1000

    def run(self) -> None:
        body = {"language": "python", "files": {"main.py": PROGRAM}}
        verdict = self.http.post(f"{self.base}/run", json=body, timeout=60).json()
        assert verdict["status"] == "ok", verdict

    def submit(self) -> None:
        body = {"problem_id": self.problem_id, "language": "python", "files": {"main.py": SOLUTION}}
        verdict = self.http.post(f"{self.base}/submit", json=body, timeout=120).json()
        assert verdict["status"] == "ok", verdict

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--pool", type=int, default=2)
    parser.add_argument("--pace", type=float, default=0.5, help="seconds between paced runs")
    args = parser.parse_args()
    image = LANGUAGES["python"].image
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "main.py").write_text(PROGRAM)
        python = HOST_PYTHON if Path(HOST_PYTHON).exists() else sys.executable
        bare = lambda: subprocess.run([python, str(tmp / "main.py")], check=True, capture_output=True)  # noqa: E731
        docker_run = lambda: subprocess.run(  # noqa: E731
            ["docker", "run", "--rm", "--network", "none", "-v", f"{tmp}:/src:ro", image, "python3", "/src/main.py"],
            check=True,
            capture_output=True,
        )
        rows: list[tuple[str, list[float], dict[int, float]]] = []  # name, ms samples, runs/s by clients
        for name, call in (("bare host python3", bare), ("plain docker run --rm", docker_run)):
            timed(call, 3)
            rows.append((name, timed(call, args.runs), {c: throughput(call, c, args.runs) for c in (1, 4)}))
        for pool in (args.pool, 0):
            server = Server(tmp, pool)
            try:
                timed(server.run, 3)
                rate = {c: throughput(server.run, c, args.runs) for c in (1, 4)}
                if pool:
                    paced = [server.paced_run(args.pace) for _ in range(args.runs)]
                    rows.append((f"judge POST /run (pool {pool}), paced", paced, {}))
                    time.sleep(args.pace)
                label = f"judge POST /run (pool {pool})" + (", back to back" if pool else "")
                rows.append((label, timed(server.run, args.runs), rate))
                if pool:
                    timed(server.submit, 2)
                    rows.append(
                        (
                            "judge POST /submit, 10 tests",
                            timed(server.submit, max(10, args.runs // 4)),
                            {c: throughput(server.submit, c, max(8, args.runs // 4)) for c in (1, 4)},
                        )
                    )
            finally:
                server.stop()
    print(f"judge overhead, trivial python program, {args.runs} runs each\n")
    print(f"{'':42}{'p50 ms':>9}{'p95 ms':>9}{'runs/s x1':>11}{'runs/s x4':>11}")
    for name, samples, rate in rows:
        print(
            f"{name:42}{percentile(samples, 0.5):9.0f}{percentile(samples, 0.95):9.0f}{_rate(rate, 1)}{_rate(rate, 4)}"
        )
    bare_p50 = percentile(rows[0][1], 0.5)
    print()
    for name, samples, _ in rows[1:]:
        print(f"{name:42} added p50 over bare: {percentile(samples, 0.5) - bare_p50:7.0f} ms")


def _rate(rates: dict[int, float], clients: int) -> str:
    return f"{rates[clients]:11.1f}" if clients in rates else f"{'-':>11}"


if __name__ == "__main__":
    main()
