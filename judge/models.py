"""Values the judge takes and returns: requests, limits, test cases and the verdict.

`Verdict` is the result shape of SPEC section 9. Test cases never reach the container as
expectations: only their stdin (or SQL setup) goes in; comparison happens in the backend.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Language = Literal["python", "javascript", "c", "cpp", "java", "sql"]
Status = Literal[
    "ok",
    "wrong_answer",
    "compile_error",
    "runtime_error",
    "timeout",
    "memory_limit",
    "output_limit",
    "internal_error",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Frozen):
    """Resource limits of one run; every step (compile, each test) gets `wall_s`."""

    wall_s: float = Field(default=5.0, gt=0, le=60)
    memory_mb: int = Field(default=256, ge=32, le=4096)
    pids: int = Field(default=64, ge=8, le=1024)
    cpus: float = Field(default=1.0, gt=0, le=8)
    output_bytes: int = Field(default=65536, ge=1024, le=16 * 1024 * 1024)
    tmpfs_mb: int = Field(default=64, ge=4, le=1024)
    file_size_mb: int = Field(default=16, ge=1, le=1024)
    nofile: int = Field(default=256, ge=16, le=65536)
    compile_wall_s: float = Field(default=20.0, gt=0, le=120)


class RunRequest(_Frozen):
    """Run the user's files once, feeding `stdin`."""

    language: Language
    files: dict[str, str]
    stdin: str = ""
    limits: Limits = Limits()


class TestCase(_Frozen):
    """One stdin/stdout test of a program."""

    __test__ = False  # not a pytest class

    name: str = Field(min_length=1, max_length=200)
    stdin: str = ""
    expected_stdout: str
    compare: Literal["exact", "trimmed", "tokens"] = "trimmed"


class SqlCase(_Frozen):
    """One SQL test: `setup_sql` builds a fresh in-memory database, then the user's query runs."""

    name: str = Field(min_length=1, max_length=200)
    setup_sql: str = ""
    expected_columns: list[str]
    expected_rows: list[list[Any]]
    ordered: bool = False


class TestResult(_Frozen):
    __test__ = False

    name: str
    passed: bool
    message: str = ""


class Verdict(_Frozen):
    """The judge's answer (SPEC section 9); `tests` only for test runs."""

    status: Status
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_ms: int = 0
    truncated: bool = False
    tests: list[TestResult] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of SPEC section 9 (`tests` present only for test runs)."""
        data = self.model_dump()
        if data["tests"] is None:
            del data["tests"]
        return data
