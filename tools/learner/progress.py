"""`start_task` and `submit`: move the learner's own progress through the state machine.

Grading runs before the write transaction (a judge run takes seconds); the status is read
again under the write lock, so two racing submissions cannot both apply.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from learner.checks import (
    AnswerRejected,
    CheckResult,
    JudgeUnavailable,
    Outcome,
    outcome,
    parse_criteria,
    run_checks,
)
from learner.progress import SUBMIT_ACTIONS, LearnerProject, Moved, Refused, can_submit, move, next_status
from storage.db import transaction
from storage.learner_tasks import AttemptRow, TaskRow, add_attempt, supersede_pending
from tools.base import CommandBinding, ErrorCode, Need, Tool, ToolContext, ToolFailure, ToolHints, ToolOutput
from tools.learner.common import RESULT_ROLE, TaskRefInput, TaskTextInput, block_message, resolve
from tools.learner.navigation import GetContextOutput, build_context

MAX_ANSWER_CHARS = 100_000


def _refused(task_id: str, status: str, verb: str) -> ToolFailure:
    """INVALID_STATE for a start or submit that `learner/progress.py` does not allow from `status`, with the call
    that helps. Which statuses refuse is decided there; only the advice is written here."""
    if status == "closed":
        return ToolFailure(
            ErrorCode.INVALID_STATE,
            f"task {task_id!r} is already closed for you, so you cannot {verb} it; "
            f"to redo it call /go_back {task_id} <reason>, or /get_ready for the next task.",
        )
    if status == "submitted":
        return ToolFailure(
            ErrorCode.INVALID_STATE,
            f"task {task_id!r} already has an answer waiting for review; "
            f"/submit {task_id} again to replace it, or /get_ready for other work.",
        )
    if status == "open":
        return ToolFailure(
            ErrorCode.INVALID_STATE,
            f"task {task_id!r} is not started; call /start_task {task_id} first, then submit again.",
        )
    return ToolFailure(
        ErrorCode.INVALID_STATE,
        f"task {task_id!r} is {status}, so you cannot {verb} it; call /show_task {task_id} to see what to do next.",
    )


# start_task --------------------------------------------------------------------------------


class StartTaskInput(TaskRefInput):
    pass


class StartTaskOutput(ToolOutput):
    task_id: str
    project_id: str
    old_status: str
    new_status: str
    message: str
    context: GetContextOutput

    def render(self) -> str:
        return f"{self.message}\n\n{self.context.render()}"


def start_task(data: StartTaskInput, ctx: ToolContext) -> StartTaskOutput:
    state, task = resolve(ctx, data.task_id)
    if next_status("start", state.status[task.id]) is None:
        raise _refused(task.id, state.status[task.id], "start")
    blockers = state.blocked_by(task)
    if blockers:
        raise ToolFailure(ErrorCode.BLOCKED, block_message(task, blockers))
    with transaction(ctx.conn):
        moved = move(ctx.conn, learner_id=ctx.user_id, task_pk=task.pk, action="start")
    if isinstance(moved, Refused):  # changed since it was read above
        raise _refused(task.id, moved.current, "start")
    message = f"Started '{task.title}'." if moved.new != moved.old else f"You are already working on '{task.title}'."
    state = LearnerProject.load(ctx.conn, ctx.user_id, task.project_id)
    return StartTaskOutput(
        task_id=task.id,
        project_id=task.project_id,
        old_status=moved.old,
        new_status=state.status[task.id],
        message=message,
        context=build_context(ctx, state, task),
    )


# submit ------------------------------------------------------------------------------------


class SubmitInput(TaskTextInput):
    text_field: ClassVar[str] = "answer"
    answer: str = Field(
        min_length=1,
        max_length=MAX_ANSWER_CHARS,
        description="The answer: the whole program, one SQL SELECT, or text, as the task asks.",
    )


class SubmitOutput(ToolOutput):
    task_id: str
    project_id: str
    submission_id: int
    attempt: int
    result: str  # passed | failed | pending_review
    checks: list[CheckResult]
    old_status: str
    new_status: str
    message: str

    def render(self) -> str:
        marks = {True: "passed", False: "FAILED", None: "waiting for review"}
        lines = [self.message]
        lines += [
            f"- {check.criterion_id} [{check.type}] {marks[check.passed]}: {check.message}" for check in self.checks
        ]
        return "\n".join(lines)


def submit(data: SubmitInput, ctx: ToolContext) -> SubmitOutput:
    state, task = resolve(ctx, data.task_id)
    if not can_submit(state.status[task.id]):
        raise _refused(task.id, state.status[task.id], "submit to")
    blockers = state.blocked_by(task)
    if blockers:
        raise ToolFailure(ErrorCode.BLOCKED, block_message(task, blockers))
    checks = _grade(task, data.answer, ctx)
    result = outcome(checks)
    attempt, moved = _record(ctx, task, data.answer, result, checks)
    return SubmitOutput(
        task_id=task.id,
        project_id=task.project_id,
        submission_id=attempt.id,
        attempt=attempt.attempt,
        result=result,
        checks=checks,
        old_status=moved.old,
        new_status=moved.new,
        message=_attempt_message(task, attempt.attempt, result),
    )


def _grade(task: TaskRow, answer: str, ctx: ToolContext) -> list[CheckResult]:
    """Every acceptance criterion checked; an answer that could not be graded counts no attempt."""
    criteria = parse_criteria(task.acceptance_criteria)
    try:
        return run_checks(
            criteria, answer, ctx.judge, ctx.remaining, pool=ctx.bounded, user=ctx.user_id
        )  # the app's warm SQL workers
    except JudgeUnavailable as error:
        raise ToolFailure(
            ErrorCode.INTERNAL_ERROR,
            f"{error}: the answer was not graded and no attempt was counted; "
            f"try /submit {task.id} again later or /request_help {task.id} <message>.",
        ) from error
    except AnswerRejected as error:
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED, f"the answer cannot be run: {error}. Fix it and submit again."
        ) from error


def _record(
    ctx: ToolContext, task: TaskRow, answer: str, result: Outcome, checks: list[CheckResult]
) -> tuple[AttemptRow, Moved]:
    """The attempt and the status it leads to, in one transaction: a refusal (the status changed
    meanwhile) rolls the attempt back, so nothing is counted."""
    with transaction(ctx.conn):
        supersede_pending(ctx.conn, ctx.user_id, task.pk)
        attempt = add_attempt(
            ctx.conn,
            learner_id=ctx.user_id,
            task_pk=task.pk,
            answer=answer,
            result=result,
            checks=[check.model_dump() for check in checks],
        )
        moved = move(
            ctx.conn,
            learner_id=ctx.user_id,
            task_pk=task.pk,
            action=SUBMIT_ACTIONS[result],
            reason=f"attempt {attempt.attempt}: {result}",
        )
        if isinstance(moved, Refused):
            raise ToolFailure(
                ErrorCode.INVALID_STATE,
                f"task {task.id!r} changed to {moved.current} meanwhile; call /show_task {task.id} and try again.",
            )
    return attempt, moved


def _attempt_message(task: TaskRow, attempt: int, result: Outcome) -> str:
    if result == "passed":
        return f"Attempt {attempt} passed: task '{task.title}' is closed. Next: /get_ready"
    if result == "pending_review":
        return f"Attempt {attempt} passed the automatic checks and waits for an instructor's review."
    return f"Attempt {attempt} did not pass; fix what failed and /submit {task.id} again."


START_TASK_TOOL = Tool(
    name="start_task",
    annotations=ToolHints(
        destructive=False, idempotent=True, open_world=False
    ),  # served over /mcp: starts or resumes: twice is once
    description="Start (or resume) a task for the learner; returns its full context. Refuses closed and blocked tasks.",
    input_model=StartTaskInput,
    output_model=StartTaskOutput,
    handler=start_task,
    result_role=RESULT_ROLE,
    needs=frozenset({Need.COURSE}),
    command=CommandBinding(
        name="start_task", usage="/start_task <task_id>", example="/start_task hello_world", args_field="task_id"
    ),
    error_style="task",
)

SUBMIT_TOOL = Tool(
    name="submit",
    annotations=ToolHints(
        destructive=False, idempotent=False, open_world=False
    ),  # served over /mcp: adds a graded attempt (and may close the task)
    description="Submit the learner's answer to a started task; it is graded by the task's criteria (code tests in "
    "the judge, SQL results, regex, or an instructor's review) and the task closes when it passes.",
    input_model=SubmitInput,
    output_model=SubmitOutput,
    handler=submit,
    result_role=RESULT_ROLE,
    needs=frozenset({Need.COURSE}),
    command=CommandBinding(
        name="submit",
        usage="/submit <task_id> then the answer (code, SQL or text) on the next lines",
        example="/submit hello_world\nprint('Hello, world!')",
        args_field="task_id",
        body_field="answer",
    ),
    timeout_s=120,
    error_style="task",
    budget="runs",  # grading may run the judge, like POST /submit
)
