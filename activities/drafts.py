"""What the model must write for one problem, and how its reply is parsed and judged.

The model answers with one JSON object (`ProblemDraft`). Parsing is deterministic: the
reply must be JSON (one surrounding code fence is tolerated), and every field is
validated by pydantic; any failure is a `DraftRejected` with a code and a message that
the next attempt's prompt quotes, so the model can fix exactly what was wrong.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError, field_validator

from commands.detect import strip_fence
from judge.models import SqlCase, TestCase

MIN_TESTS, MAX_TESTS = 3, 20
_PROGRAM_TESTS = TypeAdapter(list[TestCase])
_SQL_TESTS = TypeAdapter(list[SqlCase])


class DraftRejected(Exception):
    """A draft that cannot be used; `code` is safe to show in progress events."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ProblemDraft(BaseModel):
    """A model's draft. Prose is trimmed; code is kept exactly as written (a starter file keeps
    its final newline), but code that is only whitespace is no code."""

    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=120)]
    statement: Annotated[str, StringConstraints(strip_whitespace=True, min_length=20, max_length=6000)]
    starter_code: str = Field(min_length=1, max_length=20_000)
    reference_solution: str = Field(min_length=1, max_length=50_000)
    tests: list[dict[str, Any]] = Field(min_length=MIN_TESTS, max_length=MAX_TESTS)

    @field_validator("starter_code", "reference_solution")
    @classmethod
    def not_blank(cls, code: str) -> str:
        if not code.strip():
            raise ValueError("the code is empty")
        return code


def draft_cases(language: str, raw: list[dict[str, Any]]) -> list[TestCase] | list[SqlCase]:
    """The draft's tests as the judge's typed cases (`DraftRejected` when they do not fit)."""
    adapter = _SQL_TESTS if language == "sql" else _PROGRAM_TESTS
    try:
        cases = adapter.validate_python(raw)
    except ValidationError as error:
        raise DraftRejected("invalid_tests", f"tests do not match the schema: {_errors(error)}") from error
    names = [case.name for case in cases]
    if len(set(names)) != len(names):
        raise DraftRejected("invalid_tests", "test names must be unique")
    return cases


def parse_draft(reply: str, language: str) -> tuple[ProblemDraft, list[TestCase] | list[SqlCase]]:
    text = strip_fence(reply.strip())
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise DraftRejected(
            "invalid_json", f"the reply is not one JSON object ({error.msg} at line {error.lineno})"
        ) from error
    except RecursionError as error:
        raise DraftRejected("invalid_json", "the reply is nested too deeply to be a problem draft") from error
    if not isinstance(data, dict):
        raise DraftRejected("invalid_json", "the reply must be one JSON object")
    try:
        draft = ProblemDraft.model_validate(data)
    except ValidationError as error:
        raise DraftRejected("invalid_fields", f"invalid fields: {_errors(error)}") from error
    return draft, draft_cases(language, draft.tests)


def _errors(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in item['loc']) or 'draft'}: {item['msg']}" for item in error.errors()[:8]
    )


def schema_text(language: str) -> str:
    """The JSON shape the model must produce, written for the prompt."""
    if language == "sql":
        test = (
            '{"name": "basic", "setup_sql": "CREATE TABLE t(x INTEGER); INSERT INTO t VALUES (1);", '
            '"expected_columns": ["x"], "expected_rows": [[1]], "ordered": false}'
        )
        solution = "the SQL query that solves it"
    else:
        test = '{"name": "basic", "stdin": "1 2\\n", "expected_stdout": "3\\n"}'
        solution = "a complete program that reads stdin and writes stdout"
    return (
        "{\n"
        '  "title": "short title",\n'
        '  "statement": "the task for the learner, with input and output format and an example",\n'
        '  "starter_code": "an incomplete skeleton that does NOT solve the task",\n'
        f'  "reference_solution": "{solution}",\n'
        f'  "tests": [{test}, ...]   // {MIN_TESTS} to {MAX_TESTS} tests\n'
        "}"
    )
