"""`/run_code <language>` with the program as the body: one run in the Docker judge.

The verdict (status, exit code, output) is the tool's output even when the program fails:
a compile error or a timeout is a result the model should explain, not a tool failure.
Tool failures are only "the judge cannot run here" (NOT_CONFIGURED) and invalid input.
"""

from __future__ import annotations

from pydantic import Field

from judge.files import SubmissionError
from judge.languages import LANGUAGES
from judge.models import Language, RunRequest
from tools.base import (
    FIX_HINT,
    CommandBinding,
    ErrorCode,
    Need,
    Tool,
    ToolContext,
    ToolFailure,
    ToolHints,
    ToolInput,
    ToolOutput,
)

SHOWN_OUTPUT_CHARS = 4000
EXPLAIN_INSTEAD = "Explain the code instead."


class RunCodeInput(ToolInput):
    language: Language = Field(description="python, javascript, c, cpp, java or sql")
    code: str = Field(min_length=1, max_length=200_000, description="The whole program (or SQL query).")
    stdin: str = Field(default="", max_length=100_000)


class RunCodeOutput(ToolOutput):
    language: str
    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: int
    truncated: bool

    def render(self) -> str:
        lines = [f"status: {self.status} (exit code {self.exit_code}, {self.duration_ms} ms)"]
        for name, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            if text:
                shown = text if len(text) <= SHOWN_OUTPUT_CHARS else text[:SHOWN_OUTPUT_CHARS] + "\n[… cut]"
                lines += [f"{name}:", shown.rstrip("\n")]
        if self.truncated:
            lines.append("(output was truncated by the judge's output limit)")
        return "\n".join(lines)


def run_code(data: RunCodeInput, ctx: ToolContext) -> RunCodeOutput:
    judge = ctx.judge
    if judge is None:
        raise ToolFailure(
            ErrorCode.NOT_CONFIGURED, "code execution is not available on this server.", hint=EXPLAIN_INSTEAD
        )
    available, reason = judge.available()
    if not available:
        raise ToolFailure(
            ErrorCode.NOT_CONFIGURED,
            f"the code judge is unavailable ({reason}); try again later.",
            hint=EXPLAIN_INSTEAD,
        )
    entry = LANGUAGES[data.language].entry
    try:
        verdict = judge.run(
            RunRequest(language=data.language, files={entry: data.code}, stdin=data.stdin), ctx.cancel, user=ctx.user_id
        )
    except SubmissionError as error:
        raise ToolFailure(ErrorCode.VALIDATION_FAILED, f"{error}.", hint=FIX_HINT) from error
    return RunCodeOutput(language=data.language, **verdict.model_dump(exclude={"tests"}))


RUN_CODE_TOOL = Tool(
    name="run_code",
    annotations=ToolHints(
        read_only=True, destructive=False, idempotent=False, open_world=False
    ),  # served over /mcp: runs in a throw-away sandbox: nothing of the user's is changed, output may differ per run
    description="Run a program in an isolated sandbox (no network) and see its output.",
    input_model=RunCodeInput,
    output_model=RunCodeOutput,
    handler=run_code,
    result_role="code_tools",
    needs=frozenset({Need.JUDGE}),
    command=CommandBinding(
        name="run_code",
        usage="/run_code <language> then the program on the next lines",
        example="/run_code python\nprint(sum(range(10)))",
        request="Run a Python program that adds the numbers from 0 to 9.",
        args_field="language",
        body_field="code",
    ),
    timeout_s=90,
    budget="runs",  # a direct call runs the sandbox, like POST /run
)
