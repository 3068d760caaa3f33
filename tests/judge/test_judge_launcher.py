"""The sandbox's launcher runs every step: no `docker exec`, marks a program cannot forge.

Marked `docker`: skipped without an engine unless JUDGE_REQUIRED=1, where they fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from judge.files import build_archive
from judge.languages import LANGUAGES
from judge.models import Limits, RunRequest, TestCase, Verdict
from judge.sandbox import Sandbox, UnpackError
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


def test_the_program_sees_its_input_and_nothing_of_the_launcher(judge: Judge) -> None:
    source = """
import json, os, sys
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass  # the listing's own descriptor, closed by now
print(json.dumps({"stdin": sys.stdin.read(), "fds": fds, "env": sorted(os.environ), "judge": os.listdir(".judge")
                  if os.path.isdir(".judge") else []}))
"""
    seen = json.loads(run_py(judge, source, stdin="the input\n").stdout)
    assert seen["stdin"] == "the input\n"
    assert seen["fds"]["0"].startswith("pipe:")  # its own input, not a file and not the launcher's request pipe
    assert set(seen["fds"]) <= {"0", "1", "2", "3"}
    assert seen["judge"] == []  # no input is ever a file in the sandbox
    assert not {"nonce", "request", "size", "input", "input_size"} & {name.lower() for name in seen["env"]}


SNOOP = r"""
import os, subprocess, sys, time
mine = sys.stdin.read().strip()
def leaks():
    found = []
    for top in ("/work", "/tmp", "/dev/shm"):
        for folder, _, names in os.walk(top):
            for name in names:
                try:
                    data = open(os.path.join(folder, name), "rb").read()
                except OSError:
                    continue
                for word in data.decode("latin-1").split():
                    if word.startswith("SECRET-") and word != mine:
                        found.append(f"{os.path.join(folder, name)}: {word}")
    return sorted(set(found))
stash = "/tmp/stash"
if not os.path.exists(stash):  # the first test leaves a watcher behind that notes what later arrives
    open(stash, "w").close()
    subprocess.Popen([sys.executable, "-c", "import os, time\n"
                      "for _ in range(300):\n"
                      "    for folder, _, names in os.walk('/work'):\n"
                      "        for name in names:\n"
                      "            try: data = open(os.path.join(folder, name), 'rb').read()\n"
                      "            except OSError: continue\n"
                      "            if b'SECRET-' in data: open('/tmp/watched', 'ab').write(data + b' ')\n"
                      "    time.sleep(0.01)\n"], start_new_session=True)
time.sleep(0.2)
found = leaks()
print("leaked: " + "; ".join(found) if found else "clean")
"""


def test_a_test_can_read_no_other_tests_input_nor_any_expected_output(judge: Judge) -> None:
    """The attack: list and read every file the sandbox has, and leave a watcher running for
    the later tests. Before each test got only its own input, the first test already read
    all of them from `/work/.judge/stdin_*` (the verdict showed them)."""
    cases = [TestCase(name=f"t{i}", stdin=f"SECRET-IN-{i}\n", expected_stdout="clean") for i in range(4)]
    hidden = [TestCase(name=f"h{i}", stdin=f"SECRET-IN-h{i}", expected_stdout=f"SECRET-OUT-{i}") for i in range(2)]
    verdict = judge.run_tests("python", {"main.py": SNOOP}, cases + hidden, SMALL)
    assert verdict.tests is not None
    assert [(t.name, t.passed) for t in verdict.tests[:4]] == [(f"t{i}", True) for i in range(4)], verdict.stdout
    assert "SECRET-IN" not in verdict.stdout + verdict.stderr and "SECRET-OUT" not in verdict.stdout


def test_a_background_process_does_not_outlive_its_step(judge: Judge) -> None:
    source = (
        "import os, subprocess, sys\n"
        "if sys.stdin.read() == 'first':\n"
        "    subprocess.Popen(['sleep', '30'], start_new_session=True)\n"
        "    print('started')\n"
        "else:\n"
        "    alive = [p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/cmdline', 'rb').read() == b'sleep\\x0030\\x00']\n"
        "    print(len(alive))\n"
    )
    cases = [
        TestCase(name="first", stdin="first", expected_stdout="started"),
        TestCase(name="second", stdin="second", expected_stdout="0"),
    ]
    verdict = judge.run_tests("python", {"main.py": source}, cases, SMALL)
    assert verdict.status == "ok", (verdict.stdout, verdict.tests)


def test_killing_the_launcher_ends_only_that_run(judge: Judge) -> None:
    verdict = run_py(
        judge,
        "import os, signal\nprint('bye', flush=True)\nos.kill(os.getppid(), signal.SIGKILL)\n"
        "import time\ntime.sleep(30)\n",
    )
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
        (False, "memory limit"),
        (True, "passed"),
        (False, "runtime error"),
    ]


def test_files_that_do_not_fit_are_an_unpack_error_and_nothing_runs(judge: Judge) -> None:
    """The 4 MB work folder cannot take 6 MB of files: the first step fails before the program."""
    assert judge.client is not None
    box = Sandbox.start(judge.client, LANGUAGES["python"].image, SMALL, owner=judge.owner)
    try:
        archive = build_archive({"main.py": b"print('ran')", "big.txt": b"z" * (6 << 20)})
        with pytest.raises(UnpackError, match="could not unpack"):
            box.run_step(["python3", "main.py"], 5, files=archive)
    finally:
        box.destroy()


def test_a_large_input_reaches_the_program_whole_and_an_unread_one_keeps_the_steps_in_step(judge: Judge) -> None:
    big = "x" * (6 << 20)  # larger than the 4 MB work folder: an input never lands there
    source = (
        "import sys\nfirst = sys.stdin.read(1)\nprint('ignored' if first == 'i' else len(first + sys.stdin.read()))\n"
    )
    cases = [
        TestCase(name="reads", stdin=big, expected_stdout=str(len(big))),
        TestCase(name="ignores", stdin="i" + big, expected_stdout="ignored"),  # 6 MB left unread
        TestCase(name="after", stdin="small", expected_stdout="5"),
    ]
    verdict = judge.run_tests("python", {"main.py": source}, cases, SMALL)
    assert verdict.status == "ok", verdict.tests


def test_a_pooled_container_that_died_is_replaced() -> None:
    judge = Judge.from_env(pool_size=1)
    require_judge(*judge.available())
    try:
        assert judge.pool is not None and judge.pool.wait_full(60)
        for ready in judge.pool._ready.values():
            for box in ready:
                box.container.remove(force=True)
        verdict = judge.run(RunRequest(language="python", files={"main.py": "print('fresh')"}))
        assert (verdict.status, verdict.stdout) == ("ok", "fresh\n")
    finally:
        judge.close()
    assert leftover_containers(judge) == []
