"""The sandbox's launcher runs every step: no `docker exec`, marks a program cannot forge.

Marked `docker`: skipped without an engine unless JUDGE_REQUIRED=1, where they fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from judge.models import Limits, RunRequest, TestCase, Verdict
from judge.service import Judge
from tests.judge_support import (
    leftover_containers,
    open_judge,
    require_judge,
    run_python,
)

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("nothing_left")]

SMALL = Limits(wall_s=2, memory_mb=128, pids=32, tmpfs_mb=4)


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    yield from open_judge(limits=SMALL)



@pytest.fixture
def execs(judge: Judge, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The argv of every `docker exec` the judge creates (on the Docker client, not the judge)."""
    assert judge.client is not None
    seen: list[list[str]] = []
    original = judge.client.api.exec_create

    def counting(container: Any, cmd: list[str], *args: Any, **kwargs: Any) -> Any:
        seen.append(list(cmd))
        return original(container, cmd, *args, **kwargs)

    monkeypatch.setattr(judge.client.api, "exec_create", counting)
    return seen


def run_py(judge: Judge, source: str, stdin: str = "") -> Verdict:
    return run_python(judge, source, SMALL, stdin)


@pytest.mark.parametrize(
    ("language", "files"),
    [
        ("python", {"main.py": "print(input())"}),
        ("javascript", {"main.js": "console.log(require('fs').readFileSync(0, 'utf8').trim())"}),
        ("c", {"main.c": '#include <stdio.h>\nint main(void){char s[9];scanf("%8s",s);puts(s);}\n'}),
    ],
)
def test_runs_use_no_docker_exec(judge: Judge, execs: list[list[str]], language: str, files: dict[str, str]) -> None:
    verdict = judge.run(RunRequest(language=language, files=files, stdin="hello\n", limits=SMALL))
    assert (verdict.status, verdict.stdout) == ("ok", "hello\n")
    assert execs == []


def test_every_test_runs_in_the_same_sandbox_without_exec(judge: Judge, execs: list[list[str]]) -> None:
    source = "import os\nprint(input(), os.path.exists('/work/seen'))\nopen('/work/seen', 'w').close()\n"
    cases = [TestCase(name=f"t{i}", stdin=f"{i}\n", expected_stdout=f"{i} {i > 0}\n") for i in range(3)]
    verdict = judge.run_tests("python", {"main.py": source}, cases, SMALL)
    assert verdict.status == "ok" and verdict.tests is not None and all(t.passed for t in verdict.tests)
    assert execs == []


def test_a_program_printing_marks_keeps_them_in_its_output(judge: Judge) -> None:
    forged = "\x1e0123456789abcdef exit 0 0\x1e\x1e0123456789abcdef files\x1e"
    source = f"import sys\nsys.stdout.write({forged!r} + 'x')\nsys.stderr.write({forged!r})\nsys.exit(3)\n"
    verdict = run_py(judge, source)
    assert (verdict.status, verdict.exit_code) == ("runtime_error", 3)
    assert (verdict.stdout, verdict.stderr) == (forged + "x", forged)


def test_the_program_sees_its_stdin_file_and_nothing_of_the_launcher(judge: Judge) -> None:
    source = """
import json, os, sys
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass  # the listing's own descriptor, closed by now
print(json.dumps({"stdin": sys.stdin.read(), "fds": fds, "env": sorted(os.environ)}))
"""
    seen = json.loads(run_py(judge, source, stdin="the input\n").stdout)
    assert seen["stdin"] == "the input\n"
    assert seen["fds"]["0"] == "/work/.judge/stdin"  # a file, not the launcher's request pipe
    assert set(seen["fds"]) <= {"0", "1", "2", "3"}
    assert not {"nonce", "request", "size", "input"} & {name.lower() for name in seen["env"]}


def test_killing_the_launcher_ends_only_that_run(judge: Judge) -> None:
    verdict = run_py(judge, "import os, signal\nprint('bye', flush=True)\nos.kill(os.getppid(), signal.SIGKILL)\n"
                     "import time\ntime.sleep(30)\n")
    assert verdict.status == "internal_error" and "launcher was killed" in verdict.stderr
    assert run_py(judge, "print('next')").stdout == "next\n"


def test_the_oom_counter_is_per_step(judge: Judge) -> None:
    source = (
        "import os, signal\nword = input()\n"
        "if word == 'big':\n    blob = bytearray(512 << 20)\n"
        "if word == 'kill':\n    os.kill(os.getpid(), signal.SIGKILL)\nprint(word)\n"
    )
    cases = [TestCase(name=word, stdin=f"{word}\n", expected_stdout=f"{word}\n") for word in ("big", "small", "kill")]
    verdict = judge.run_tests("python", {"main.py": source}, cases, SMALL)
    assert verdict.tests is not None
    assert [(t.passed, t.message.split(":")[0]) for t in verdict.tests] == [
        (False, "memory limit"), (True, "passed"), (False, "runtime error")
    ]


def test_files_that_do_not_fit_are_an_internal_error_and_nothing_runs(judge: Judge) -> None:
    source = "print('ran')\n"
    verdict = run_py(judge, source, stdin="z" * (6 << 20))
    assert verdict.status == "internal_error" and "could not unpack" in verdict.stderr and "ran" not in verdict.stdout


def test_a_pooled_container_that_died_is_replaced() -> None:
    judge = Judge.from_env(pool_size=1)
    require_judge(*judge.available())
    try:
        assert judge.pool is not None and judge.pool.wait_full(60)
        for ready in judge.pool._ready.values():  # noqa: SLF001 - the test reaches in to break pooled boxes
            for box in ready:
                box.container.remove(force=True)
        verdict = judge.run(RunRequest(language="python", files={"main.py": "print('fresh')"}))
        assert (verdict.status, verdict.stdout) == ("ok", "fresh\n")
    finally:
        judge.close()
    assert leftover_containers(judge) == []
