"""`Judge`: run a program once (`run`) or against tests (`run_tests`) and return a `Verdict`.

Each call uses one fresh sandbox (`judge/sandbox.py`), optionally taken from the pool
(`judge/pool.py`): compile step once, then one run step per test, the files travelling with
the first step (one request fewer), and the sandbox is destroyed in a `finally` whatever
happens. The engine may be another machine's (`judge/engine.py`): nothing here reads or mounts
a host path, so a remote engine runs the same hardened containers. Each test's input (stdin,
or the SQL setup script) travels with its own step only, so no test can read another's;
expected outputs stay here. A pooled sandbox that cannot take the files (it died meanwhile)
is swapped for a fresh one; nothing of the user's ran in it. Verdicts:
- `compile_error`: the compile step exited non-zero (its stderr is kept);
- `memory_limit`: a step died of SIGKILL and the cgroup OOM counter went up;
- `timeout`: a step passed its wall-clock deadline (the container was killed);
- `output_limit`: stdout or stderr passed the cap (the partial output is kept);
- `runtime_error`: a step exited non-zero or died of a signal (`exit_code` 128+N);
- `wrong_answer`: a test step exited 0 but its stdout (or SQL result document) differs;
- `internal_error`: the Docker engine failed, or went away or hung during the run (the
  message is in `stderr`); kills and removals use a client with a short timeout
  (`CONTROL_TIMEOUT_S`), so a hung judge host costs a run its limits plus that, never a hang.
  After such a failure the engine is asked again before the next run, and once it answers,
  the removals the outage prevented are done (`judge/cleanup.py`).
A timeout or output overflow kills the sandbox, so later tests are reported as not run.

Run admission (SPEC 12): at most `runs` runs hold a sandbox at once, over every user, and a
run carries its user (`run(..., user=)`). The places are a `foundation.fair_share.FairGate`:
a place that comes free goes to the waiting run whose user holds the fewest (then the
oldest), so one user's burst of runs never queues ahead of another user's run; a run that
gets no place within `QUEUE_WAIT_S` raises `Busy` (503 `busy` with `Retry-After` over HTTP,
a BUSY tool error in chat), before any container starts.
In `run_tests` the overall status is `ok` only when every test passed, else the status of
the first failing test, whose stdout/stderr/exit code the verdict carries; `duration_ms` is
the sum of the run steps (compilation excluded). For SQL, `run` treats `stdin` as the setup
script of the in-memory database. Bad submissions (names, sizes, missing entry file, wrong
case type) raise `SubmissionError` before any container starts.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import docker

from foundation.cancellation import NEVER, Callback, CancelToken
from foundation.fair_share import Busy, FairGate
from judge.cleanup import Cleanup
from judge.compare import compare_sql, compare_stdout
from judge.engine import ENGINE_ERRORS, EngineAddress, EngineUnavailable, connect, short_error
from judge.files import MAX_JUDGE_BYTES, SubmissionError, build_archive, check_files
from judge.languages import LANGUAGES, SQL_RUNNER, Language
from judge.models import Limits, RunRequest, SqlCase, Status, TestCase, TestResult, Verdict
from judge.pool import ContainerPool
from judge.reaper import reap
from judge.sandbox import Sandbox, SandboxError, StepResult, UnpackError
from observe.telemetry import Telemetry

MAX_TESTS = 100
AVAILABLE_TTL_S = 5.0  # the default of `Judge(available_ttl_s=…)`
POOL_WAIT_S = 1.0  # longest wait for a pooled sandbox being started (a fresh start takes ~0.2 s)
CONTROL_TIMEOUT_S = 10.0  # kill, inspect and remove: longer only when the engine is in trouble
RECONNECT_EVERY_S = 5.0  # a judge whose engine was down at start tries again at most this often
DEFAULT_RUNS = 4  # JUDGE_RUNS: runs holding a sandbox at once (a 2-core machine)
QUEUE_WAIT_S = 10.0  # longest wait for a place among `runs` before the run is refused as busy


class Judge:
    """The code judge; `client` None means Docker is unavailable for `reason` (a judge made by
    `from_env` keeps trying to connect, see `_try_reconnect`)."""

    def __init__(
        self,
        client: docker.DockerClient | None,
        *,
        limits: Limits | None = None,
        pool_size: int = 0,
        reason: str = "",
        available_ttl_s: float = AVAILABLE_TTL_S,
        control: docker.DockerClient | None = None,
        address: EngineAddress | None = None,
        runs: int = DEFAULT_RUNS,
        queue_wait_s: float = QUEUE_WAIT_S,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.client = client
        self.telemetry = telemetry or Telemetry.off()  # a span per run (SPEC 16)
        self.runs = FairGate(runs)  # run admission, a fair share per user
        self.queue_wait_s = queue_wait_s
        control = control or client  # kills and removals: a short timeout, see CONTROL_TIMEOUT_S
        self.cleanup = Cleanup(control) if control is not None else None
        self.address = address or EngineAddress()
        self.limits = limits or Limits()
        self.available_ttl_s = available_ttl_s
        self.owner = uuid.uuid4().hex[:12]  # label of this judge's containers
        self._reason = reason or "no Docker client"
        self._pool: ContainerPool | None = None
        self._available_at = float("-inf")
        self._outage = False  # an engine failure was seen; its leftovers are swept when it answers
        self._pool_size = pool_size
        self._reconnect: Callable[[], tuple[docker.DockerClient, docker.DockerClient]] | None = None
        self._tried_at = time.monotonic()
        self._connecting = threading.Lock()
        if client is not None:
            self._start_pool(client)

    def _start_pool(self, client: docker.DockerClient) -> None:
        if self._pool_size > 0:
            images = sorted({language.image for language in LANGUAGES.values()})
            self._pool = ContainerPool(client, images, self._pool_size, self.limits, self.owner, cleanup=self.cleanup)

    @classmethod
    def from_env(
        cls,
        *,
        address: EngineAddress | None = None,
        limits: Limits | None = None,
        pool_size: int = 0,
        timeout_s: float = 30,
        runs: int = DEFAULT_RUNS,
        telemetry: Telemetry | None = None,
    ) -> Judge:
        """A judge on the engine at `address` (default: this process's DOCKER_HOST, DOCKER_TLS_VERIFY,
        DOCKER_CERT_PATH; none: the local socket); never raises."""
        engine = address or EngineAddress.from_environ(os.environ)

        def clients() -> tuple[docker.DockerClient, docker.DockerClient]:
            control = connect(engine, min(timeout_s, CONTROL_TIMEOUT_S))  # first: fails sooner on a dead host
            return connect(engine, timeout_s), control

        try:
            client, control = clients()
        except EngineUnavailable as error:
            judge = cls(
                None,
                reason=str(error),
                address=engine,
                limits=limits,
                pool_size=pool_size,
                runs=runs,
                telemetry=telemetry,
            )
            judge._reconnect = clients  # the engine may come up later (a judge host booting)
            return judge
        return cls(
            client, limits=limits, pool_size=pool_size, control=control, address=engine, runs=runs, telemetry=telemetry
        )

    @property
    def pool(self) -> ContainerPool | None:
        return self._pool

    def available(self) -> tuple[bool, str]:
        """(True, "") when the engine answers and every language image is present.

        A positive answer is reused for `available_ttl_s` seconds (asking the engine costs ~7 ms,
        on every `/run`); a negative one is never reused, so a recovered engine is seen at
        once, and a run on an engine that went away still fails cleanly as internal_error.
        """
        if self.client is None:
            self._try_reconnect()
        if self.client is None:
            return False, self._reason
        if time.monotonic() - self._available_at < self.available_ttl_s:
            return True, ""
        ready, reason = self._ask_engine()
        self._available_at = time.monotonic() if ready else float("-inf")
        if not ready:
            self._outage = True
        elif self._outage:
            self._outage = False
            self._sweep()
        return ready, reason

    def _try_reconnect(self) -> None:
        """A judge made by `from_env` whose engine did not answer connects once it does: one attempt
        at a time, at most every `RECONNECT_EVERY_S` (callers meanwhile get the last reason). What
        dead processes left on that engine is reaped first, as at a start."""
        if self._reconnect is None or time.monotonic() - self._tried_at < RECONNECT_EVERY_S:
            return
        if not self._connecting.acquire(blocking=False):
            return
        try:
            self._tried_at = time.monotonic()
            try:
                client, control = self._reconnect()
            except EngineUnavailable as error:
                self._reason = str(error)
                return
            self.cleanup = Cleanup(control)
            reap(client)
            self._start_pool(client)
            self.client = client
        finally:
            self._connecting.release()

    def _suspect(self) -> None:
        """A run met an engine failure: ask the engine again before the next run, sweep once it answers."""
        self._available_at = float("-inf")
        self._outage = True

    def _sweep(self) -> None:
        """Do the removals the outage prevented (a container it could not kill may still run there)."""
        if self.cleanup is not None:
            self.cleanup.retry()
            if self.cleanup.owed():
                self._outage = True  # again at the next answer

    def _ask_engine(self) -> tuple[bool, str]:
        assert self.client is not None
        try:
            self.client.ping()
            present = {tag for image in self.client.images.list(name="orchestrator-judge-*") for tag in image.tags}
        except ENGINE_ERRORS as error:
            return False, f"Docker engine {self.address.describe()} unreachable: {short_error(error)}"
        missing = sorted({language.image for language in LANGUAGES.values()} - present)
        if missing:
            return False, f"judge images missing (run `make judge-images`): {', '.join(missing)}"
        return True, ""

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self.cleanup is not None:
            self.cleanup.retry()  # removals an outage left owed, if the engine answers now

    def run(self, request: RunRequest, cancel: CancelToken = NEVER, *, user: int | None = None) -> Verdict:
        """Run the files once with `request.stdin` in `user`'s share; a cancel kills the container
        and raises `Cancelled`; no place within `queue_wait_s` raises `Busy`."""
        language = _language(request.language)
        user_files = _checked(language, request.files)
        stdin = request.stdin.encode("utf-8", "replace")
        _check_input_size(len(stdin))
        limits = request.limits
        archive = build_archive(user_files, _with_runner(language, {}))
        argv = _run_argv(language)
        try:
            with self._sandbox(language, limits, archive, (argv, stdin), cancel, user) as (box, step):
                if language.compile is not None:
                    failed = _compile_failure(step)
                    if failed is not None:
                        return failed
                    step = box.run_step(argv, limits.wall_s, stdin)
        except SandboxError as error:
            self._suspect()
            cancel.raise_if_cancelled()
            return _internal(error)
        cancel.raise_if_cancelled()
        return _verdict(_status(step), step)

    def run_tests(
        self,
        language_name: str,
        files: Mapping[str, str],
        cases: Sequence[TestCase] | Sequence[SqlCase],
        limits: Limits | None = None,
        cancel: CancelToken = NEVER,
        *,
        user: int | None = None,
    ) -> Verdict:
        """Compile once, run every case in the same sandbox, report each test (a cancel kills it;
        no place for `user` within `queue_wait_s` raises `Busy`)."""
        language = _language(language_name)
        archive, inputs = _test_submission(language, files, cases)
        tally = _Tally(limits or self.limits)
        argv = _run_argv(language)
        try:
            with self._sandbox(language, tally.limits, archive, (argv, inputs[0]), cancel, user) as (box, first):
                failed = _compile_failure(first) if language.compile is not None else None
                if failed is not None:
                    return _none_run(failed, cases)
                first_test = first if language.compile is None else None  # else the first step was the compile step
                _run_cases(box, first_test, argv, cases, inputs, tally)
        except SandboxError as error:
            self._suspect()
            cancel.raise_if_cancelled()
            return _internal(error).model_copy(update={"tests": tally.results or None})
        cancel.raise_if_cancelled()
        return tally.verdict()

    @contextmanager
    def _sandbox(
        self,
        language: Language,
        limits: Limits,
        archive: bytes,
        run_step: tuple[list[str], bytes],
        cancel: CancelToken = NEVER,
        user: int | None = None,
    ) -> Iterator[tuple[Sandbox, StepResult]]:
        """A sandbox and its first step, which unpacked `archive` into /work and then ran.

        The first step is the compile step (no input), or else `run_step` (argv, the first
        input). The sandbox is destroyed (or handed to the pool thread) at exit.
        """
        if self.client is None:
            raise SandboxError(f"judge unavailable: {self._reason}")
        if language.compile is not None:
            first = _FirstStep(list(language.compile), limits.compile_wall_s, b"")
        else:
            first = _FirstStep(run_step[0], limits.wall_s, run_step[1])
        cancel.raise_if_cancelled()
        with (
            self.telemetry.judge_run(language.name),
            self._placed(language, limits, archive, first, cancel, user) as started,
        ):
            yield started

    @contextmanager
    def _placed(
        self,
        language: Language,
        limits: Limits,
        archive: bytes,
        first: _FirstStep,
        cancel: CancelToken,
        user: int | None,
    ) -> Iterator[tuple[Sandbox, StepResult]]:
        """`_sandbox` once it is traced: wait for a place in `user`'s share, then start."""
        if not self.runs.acquire(user, time.monotonic() + self.queue_wait_s, cancel):
            cancel.raise_if_cancelled()
            raise Busy(
                f"the code judge is busy with other users' runs ({self.runs.capacity} at once); try again shortly."
            )
        try:
            with self._admitted(language, limits, archive, first, cancel) as started:
                yield started
        finally:
            self.runs.release(user)

    @contextmanager
    def _admitted(
        self, language: Language, limits: Limits, archive: bytes, first: _FirstStep, cancel: CancelToken
    ) -> Iterator[tuple[Sandbox, StepResult]]:
        """`_sandbox` once the run has its place."""
        assert self.client is not None  # `_sandbox` checked
        started = None
        pooled = self._pool.take(language.image, limits, POOL_WAIT_S) if self._pool else None
        if pooled is not None:
            started = self._first_step(pooled, archive, first, cancel, pooled=True)
        if started is None:
            fresh = Sandbox.start(self.client, language.image, limits, owner=self.owner, cleanup=self.cleanup)
            started = self._first_step(fresh, archive, first, cancel, pooled=False)
        assert started is not None  # a fresh sandbox's failure raises
        box, step, forget = started
        try:
            yield box, step
        finally:
            forget()
            self._release(box)

    def _first_step(
        self,
        box: Sandbox,
        archive: bytes,
        first: _FirstStep,
        cancel: CancelToken,
        *,
        pooled: bool,
    ) -> tuple[Sandbox, StepResult, Callback] | None:
        """Run `first` in `box` with the files, a cancel killing it; also returns the cancel hook's remover.

        None when a pooled sandbox cannot take the files (it died meanwhile: nothing of the
        user's ran, a fresh one is used); any other failure releases the box and raises.
        """
        forget = cancel.on_cancel(box.kill)
        try:
            return box, box.run_step(first.argv, first.timeout_s, first.stdin, files=archive), forget
        except UnpackError:
            forget()
            self._release(box)
            if pooled:
                return None
            raise
        except BaseException:
            forget()
            self._release(box)
            raise

    def _release(self, box: Sandbox) -> None:
        if self._pool is not None:
            self._pool.discard(box)
        else:
            box.destroy()


@dataclass(frozen=True)
class _FirstStep:
    """What a sandbox runs first, with the files: the compile step, or the first test's run."""

    argv: list[str]
    timeout_s: float
    stdin: bytes


@dataclass
class _Tally:
    """The per-test results of one `run_tests` call, as its steps come in."""

    limits: Limits
    results: list[TestResult] = field(default_factory=list)
    first_failure: tuple[Status, StepResult] | None = None
    last: StepResult | None = None
    total_ms: int = 0

    def add(self, case: TestCase | SqlCase, step: StepResult) -> None:
        """Grade one test's step; the first failing one decides the verdict's status."""
        self.total_ms += step.duration_ms
        self.last = step
        status, passed, message = _grade(case, step, self.limits)
        self.results.append(TestResult(name=case.name, passed=passed, message=message))
        if not passed and self.first_failure is None:
            self.first_failure = (status, step)

    def skip(self, case: TestCase | SqlCase) -> None:
        """A test that could not run: the sandbox was killed by an earlier one."""
        self.results.append(TestResult(name=case.name, passed=False, message=_not_run_message(self.first_failure)))

    def verdict(self) -> Verdict:
        """`ok` when every test passed, else the first failure's status and output; run steps' time summed."""
        status: Status = "ok"
        shown = self.last
        if self.first_failure is not None:
            status, shown = self.first_failure
        assert shown is not None  # at least one case ran
        verdict = _verdict(status, shown)
        truncated = any(r.message.startswith("output limit") for r in self.results) or verdict.truncated
        return verdict.model_copy(update={"tests": self.results, "duration_ms": self.total_ms, "truncated": truncated})


def _test_submission(
    language: Language,
    files: Mapping[str, str],
    cases: Sequence[TestCase] | Sequence[SqlCase],
) -> tuple[bytes, list[bytes]]:
    """The archive of the files and each case's input, or `SubmissionError` before any container starts."""
    user_files = _checked(language, files)
    _check_cases(language, cases)
    inputs = [_case_input(case) for case in cases]
    _check_input_size(sum(map(len, inputs)))
    return build_archive(user_files, _with_runner(language, {})), inputs


def _run_cases(
    box: Sandbox,
    first_test: StepResult | None,
    argv: list[str],
    cases: Sequence[TestCase | SqlCase],
    inputs: list[bytes],
    tally: _Tally,
) -> None:
    """Run each case in `box`; `first_test` is the first case's step when it already ran.

    After a kill (timeout, output overflow) the remaining cases are reported as not run.
    """
    for index, case in enumerate(cases):
        if index == 0 and first_test is not None:
            tally.add(case, first_test)
        elif box.killed:
            tally.skip(case)
        else:
            tally.add(case, box.run_step(argv, tally.limits.wall_s, inputs[index]))


def _grade(case: TestCase | SqlCase, step: StepResult, limits: Limits) -> tuple[Status, bool, str]:
    """(status, passed, message) of one test step; an SQL runner's error exit is still compared (expected errors)."""
    status = _status(step)
    if status == "ok" or (status == "runtime_error" and isinstance(case, SqlCase)):
        passed, message = _compare(case, step)
        return ("wrong_answer" if not passed and status == "ok" else status), passed, message
    return status, False, _failure_message(status, step, limits)


def _none_run(compile_failure: Verdict, cases: Sequence[TestCase | SqlCase]) -> Verdict:
    """The compile failure's verdict, every test marked as not run."""
    not_run = [TestResult(name=case.name, passed=False, message="not run: compile error") for case in cases]
    return compile_failure.model_copy(update={"tests": not_run})


def _compile_failure(step: StepResult) -> Verdict | None:
    """The verdict of a compile step that did not succeed, else None."""
    status = _status(step)
    if status == "ok":
        return None
    if status in ("runtime_error", "output_limit"):
        status = "compile_error"
    return _verdict(status, step)


def _language(name: str) -> Language:
    if name not in LANGUAGES:
        raise SubmissionError(f"unknown language {name!r}; use one of {', '.join(LANGUAGES)}")
    return LANGUAGES[name]


def _checked(language: Language, files: Mapping[str, str]) -> dict[str, bytes]:
    user_files = check_files(files)
    if language.entry not in user_files:
        raise SubmissionError(f"{language.name} submissions need a file named {language.entry!r}")
    return user_files


def _check_cases(language: Language, cases: Sequence[TestCase] | Sequence[SqlCase]) -> None:
    if not cases:
        raise SubmissionError("no tests to run")
    if len(cases) > MAX_TESTS:
        raise SubmissionError(f"{len(cases)} tests; at most {MAX_TESTS} run per submission")
    wanted = SqlCase if language.name == "sql" else TestCase
    if not all(isinstance(case, wanted) for case in cases):
        raise SubmissionError(f"{language.name} tests must be {wanted.__name__} values")


def _with_runner(language: Language, judge_files: dict[str, bytes]) -> dict[str, bytes]:
    if language.name == "sql":
        return {**judge_files, "sql_runner.py": SQL_RUNNER.read_bytes()}
    return judge_files


def _run_argv(language: Language) -> list[str]:
    """The run step's command; the SQL runner reads its setup script from stdin (`-`)."""
    return [*language.run, "-"] if language.name == "sql" else list(language.run)


def _case_input(case: TestCase | SqlCase) -> bytes:
    """What one test's program reads on stdin: its input, or the SQL setup script."""
    text = case.setup_sql if isinstance(case, SqlCase) else case.stdin
    return text.encode("utf-8", "replace")


def _check_input_size(total: int) -> None:
    if total > MAX_JUDGE_BYTES:
        raise SubmissionError(f"the test input totals more than {MAX_JUDGE_BYTES} bytes")


def _status(step: StepResult) -> Status:
    if step.oom_killed:
        return "memory_limit"
    if step.timed_out:
        return "timeout"
    if step.truncated:
        return "output_limit"
    if step.exit_code is None:
        return "internal_error"
    return "ok" if step.exit_code == 0 else "runtime_error"


def _compare(case: TestCase | SqlCase, step: StepResult) -> tuple[bool, str]:
    stdout = step.stdout.decode("utf-8", "replace")
    return compare_sql(case, stdout) if isinstance(case, SqlCase) else compare_stdout(case, stdout)


def _failure_message(status: Status, step: StepResult, limits: Limits) -> str:
    if status == "timeout":
        return f"timeout: no answer within {limits.wall_s:g} s"
    if status == "memory_limit":
        return f"memory limit: more than {limits.memory_mb} MB used"
    if status == "output_limit":
        return f"output limit: more than {limits.output_bytes} bytes printed"
    if status == "runtime_error" and step.exit_code is not None and step.exit_code > 128:
        return f"runtime error: killed by signal {step.exit_code - 128}"
    if status == "runtime_error":
        return f"runtime error: exit code {step.exit_code}"
    return "internal error: the step's exit code could not be read"


def _not_run_message(first_failure: tuple[Status, StepResult] | None) -> str:
    reason = first_failure[0] if first_failure else "an earlier failure"
    return f"not run: the sandbox was stopped after a {reason.replace('_', ' ')}"


def _verdict(status: Status, step: StepResult) -> Verdict:
    return Verdict(
        status=status,
        exit_code=step.exit_code,
        stdout=step.stdout.decode("utf-8", "replace"),
        stderr=step.stderr.decode("utf-8", "replace"),
        duration_ms=step.duration_ms,
        truncated=step.truncated,
    )


def _internal(error: Exception) -> Verdict:
    return Verdict(status="internal_error", stderr=str(error)[:2000])
