"""Where a turn's own time goes: a sampling profile of the real server while it answers turns.

    .venv/bin/python bench/turn_profile.py [--kind plain|memory] [--seconds 20] [--top 40]
    .venv/bin/python bench/turn_profile.py --against /tmp/old --against-python /tmp/old-venv/bin/python

The server (`python app.py`, one process, a session of `--messages` stored messages, the fake
model of `testing/fake_llm.py` answering at once) answers turns back to back from one client
while `py-spy` samples every thread of it (`--idle` off: only threads that run count, so the
time threads spend waiting on each other or the model is not in the figures). Printed: the
share of samples whose stack passes through each of the product's functions (inclusive), the
busiest first, so "which part of a turn costs what" is read off one table; with `--against`
the same table for another checkout, side by side. py-spy is in `requirements-test.txt`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import start_server, stop_server  # noqa: E402
from bench.turn_overhead import WORDS, seed  # noqa: E402
from storage.db import Database  # noqa: E402
from testing.fake_llm import FakeLLMServer  # noqa: E402


def profile(root: Path, python: str, args: argparse.Namespace) -> Counter[str]:
    """Inclusive sample counts per `module:function` of the product, and the total (`*`)."""
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(default_reply="Sure, here you go.") as llm:
        database = Database(Path(tmp) / "bench.db")
        token, session_id = seed(database, args.messages)
        process, port = start_server(tmp, database.path, llm.openai_base_url, root=root, python=python)
        base, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}
        http = requests.Session()

        def turn() -> None:
            if args.kind == "memory":
                llm.queue(f"/memory_search {WORDS[50]} {WORDS[80]}", "Found it.")
            http.post(
                f"{base}/chat", json={"message": "hello", "session_id": session_id}, headers=headers, timeout=10
            ).raise_for_status()

        for _ in range(50):  # warm-up
            turn()
        stop = threading.Event()

        def drive() -> None:
            while not stop.is_set():
                turn()

        driver = threading.Thread(target=drive)
        out = Path(tmp) / "profile.txt"
        try:
            driver.start()
            spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
            subprocess.run(
                [
                    spy,
                    "record",
                    "--pid",
                    str(process.pid),
                    "--duration",
                    str(args.seconds),
                    "--rate",
                    "200",
                    "--format",
                    "raw",
                    "--output",
                    str(out),
                    "--nonblocking",
                    "--threads",
                ],
                check=True,
                capture_output=True,
            )
        finally:
            stop.set()
            driver.join()
            stop_server(process)
        return counts(out.read_text(), root)


def counts(collapsed: str, root: Path) -> Counter[str]:
    """Each product function's inclusive share (a frame counted once per stack)."""
    found: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, number = line.rpartition(" ")
        if not number.isdigit():
            continue
        samples = int(number)
        found["*"] += samples
        seen: set[str] = set()
        for frame in stack.split(";"):
            name = frame_name(frame, root)
            if name and name not in seen:
                seen.add(name)
                found[name] += samples
    return found


def frame_name(frame: str, root: Path) -> str | None:
    """`module:function` of a frame (py-spy's raw frames read `function (path/file.py:line)`,
    the path relative to its root on `sys.path`); None for a thread's own label."""
    if " (" not in frame:
        return None
    function, _, where = frame.rpartition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{path.removesuffix('.py').replace('/', '.')}:{function.strip()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=("plain", "memory"), default="plain")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--against", type=Path)
    parser.add_argument("--against-python", default=sys.executable)
    args = parser.parse_args()
    tables = {"this": profile(ROOT, sys.executable, args)}
    if args.against is not None:
        tables["other"] = profile(args.against.resolve(), args.against_python, args)
    mine = tables["this"]
    names = [name for name, _ in mine.most_common() if name != "*"][: args.top]
    header = f"{'function (inclusive share of busy samples)':70}{'this':>8}"
    print(header + (f"{args.against.name if args.against else '':>8}" if len(tables) > 1 else ""))
    for name in names:
        row = f"{name[:70]:70}{100 * mine[name] / mine['*']:7.1f}%"
        if "other" in tables:
            other = tables["other"]
            row += f"{100 * other[name] / other['*']:7.1f}%" if other["*"] else ""
        print(row)
    print(f"\nsamples: this {mine['*']}" + (f", other {tables['other']['*']}" if "other" in tables else ""))
    time.sleep(0)


if __name__ == "__main__":
    main()
