"""The files travel with the first step: one exec for an interpreted run, a forgery-proof mark.

Marked `docker`: skipped without an engine unless JUDGE_REQUIRED=1, where they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from judge.models import Limits, RunRequest, TestCase
from judge.sandbox import _UNPACKED
from judge.service import Judge
from tests.judge_support import leftover_containers, open_judge, require_judge

pytestmark = pytest.mark.docker

SMALL = Limits(wall_s=2, memory_mb=128, pids=32, tmpfs_mb=4)


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    yield from open_judge(limits=SMALL)


@pytest.fixture(autouse=True)
def nothing_left(judge: Judge) -> Iterator[None]:
    yield
    assert leftover_containers(judge) == []


@pytest.fixture
def execs(judge: Judge, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The argv of every exec the judge creates."""
    assert judge.client is not None
    seen: list[list[str]] = []
    original = judge.client.api.exec_create

    def counting(container: Any, cmd: list[str], *args: Any, **kwargs: Any) -> Any:
        seen.append(list(cmd))
        return original(container, cmd, *args, **kwargs)

    monkeypatch.setattr(judge.client.api, "exec_create", counting)
    return seen


@pytest.mark.parametrize(
    ("language", "files", "count"),
    [
        ("python", {"main.py": "print(input())"}, 1),
        ("javascript", {"main.js": "console.log(require('fs').readFileSync(0, 'utf8').trim())"}, 1),
        ("c", {"main.c": '#include <stdio.h>\nint main(void){char s[9];scanf("%8s",s);puts(s);}\n'}, 2),
    ],
)
def test_a_run_unpacks_the_files_in_its_first_step(
    judge: Judge, execs: list[list[str]], language: str, files: dict[str, str], count: int
) -> None:
    verdict = judge.run(RunRequest(language=language, files=files, stdin="hello\n", limits=SMALL))
    assert (verdict.status, verdict.stdout) == ("ok", "hello\n")
    assert len(execs) == count and "tar -x" in execs[0][2] and all("tar" not in " ".join(c) for c in execs[1:])


def test_tests_after_the_first_reuse_the_unpacked_files(judge: Judge, execs: list[list[str]]) -> None:
    cases = [TestCase(name=f"t{i}", stdin=f"{i}\n", expected_stdout=f"{i}\n") for i in range(3)]
    verdict = judge.run_tests("python", {"main.py": "print(input())"}, cases, SMALL)
    assert verdict.status == "ok" and verdict.tests is not None and all(t.passed for t in verdict.tests)
    assert len(execs) == 3 and sum("tar -x" in " ".join(c) for c in execs) == 1


def test_a_program_printing_the_mark_keeps_it_in_its_output(judge: Judge) -> None:
    mark = _UNPACKED.decode()
    source = f"import sys\nsys.stdout.write({mark!r} + 'x')\nsys.exit(3)\n"
    verdict = judge.run(RunRequest(language="python", files={"main.py": source}, limits=SMALL))
    assert (verdict.status, verdict.exit_code, verdict.stdout) == ("runtime_error", 3, mark + "x")


def test_files_that_do_not_fit_are_an_internal_error_and_nothing_runs(judge: Judge) -> None:
    source = "print('ran')\n"
    verdict = judge.run(RunRequest(language="python", files={"main.py": source}, stdin="z" * (6 << 20), limits=SMALL))
    assert verdict.status == "internal_error" and "could not unpack" in verdict.stderr and "ran" not in verdict.stdout


def test_a_pooled_container_that_died_is_replaced() -> None:
    judge = Judge.from_env(pool_size=1)
    require_judge(*judge.available())
    try:
        assert judge.pool is not None and judge.pool.wait_full(60)
        python_image = judge.pool._ready  # noqa: SLF001 - the test reaches in to break a pooled box
        for ready in python_image.values():
            for box in ready:
                box.container.remove(force=True)
        verdict = judge.run(RunRequest(language="python", files={"main.py": "print('fresh')"}))
        assert (verdict.status, verdict.stdout) == ("ok", "fresh\n")
    finally:
        judge.close()
    assert leftover_containers(judge) == []
