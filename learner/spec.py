"""The task project file format, validated with pydantic, and the whole-project rules.

A file is `{"project": {id, title, description}, "tasks": [TaskSpec, ...]}`. Per task:
`id` (unique in the project), `title`, `description`, `type` (`task` | `subtask`; a subtask
names a top-level `parent`), `depends_on` (ids in the same project), `priority` (0 = most
urgent … 4), `learning_objectives` and at least one acceptance criterion of type
`code_test`, `sql_result`, `text_match` or `manual`. Each criterion is checked when the
file is read: SQL setup scripts must run, regexes must compile, code tests need cases.
Rules across tasks (duplicate ids, unknown dependency or parent, cycles) are in
`project_problems`, which names the offending task.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Annotated, Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from judge.models import TestCase
from judge.service import MAX_TESTS

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_PATTERN_CHARS = 2000
MAX_CRITERIA = 20


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Criterion(_Spec):
    id: str = Field(pattern=ID_PATTERN, description="Unique within the task; c1, c2, … when left out.")
    description: str = Field(min_length=1, max_length=2000)


class CodeTestCriterion(_Criterion):
    """The answer is a program; every case runs in the judge (stdin in, stdout compared)."""

    type: Literal["code_test"]
    language: Literal["python", "javascript", "c", "cpp", "java"] = "python"
    cases: list[TestCase] = Field(min_length=1, max_length=MAX_TESTS)


class SqlResultCriterion(_Criterion):
    """The answer is one SELECT; its result on a fresh database built by `setup_sql` must match."""

    type: Literal["sql_result"]
    setup_sql: str = Field(default="", max_length=200_000)
    expected_columns: list[str] = Field(min_length=1, max_length=100)
    expected_rows: list[list[Any]] = Field(max_length=1000)
    ordered: bool = False

    @field_validator("setup_sql")
    @classmethod
    def setup_runs(cls, value: str) -> str:
        db = sqlite3.connect(":memory:")
        try:
            db.executescript(value)
        except sqlite3.Error as error:
            raise ValueError(f"setup_sql does not run on SQLite: {error}") from None
        finally:
            db.close()
        return value

    @model_validator(mode="after")
    def rows_match_columns(self) -> SqlResultCriterion:
        for number, row in enumerate(self.expected_rows, start=1):
            if len(row) != len(self.expected_columns):
                raise ValueError(
                    f"expected_rows[{number}] has {len(row)} values but there are {len(self.expected_columns)} columns"
                )
        return self


class TextMatchCriterion(_Criterion):
    """The answer (any text) must match a regular expression (the `regex` module's syntax)."""

    type: Literal["text_match"]
    pattern: str = Field(min_length=1, max_length=MAX_PATTERN_CHARS)
    mode: Literal["search", "fullmatch"] = "search"
    ignore_case: bool = False

    @field_validator("pattern")
    @classmethod
    def pattern_compiles(cls, value: str) -> str:
        try:
            regex.compile(value)
        except regex.error as error:
            raise ValueError(f"pattern is not a valid regex: {error}") from None
        return value


class ManualCriterion(_Criterion):
    """An instructor reviews the answer (`GET /task-reviews`); the task waits as `submitted`."""

    type: Literal["manual"]
    rubric: str = Field(default="", max_length=4000)


Criterion = Annotated[
    CodeTestCriterion | SqlResultCriterion | TextMatchCriterion | ManualCriterion, Field(discriminator="type")
]


class LearningObjective(_Spec):
    level: Literal["remember", "understand", "apply", "analyze", "evaluate", "create"] = "apply"
    description: str = Field(min_length=1, max_length=1000)


class TaskSpec(_Spec):
    id: str = Field(pattern=ID_PATTERN)
    title: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=20_000)
    type: Literal["task", "subtask"] = "task"
    parent: str | None = None
    depends_on: list[str] = Field(default_factory=list, max_length=50)
    priority: int = Field(default=2, ge=0, le=4)
    learning_objectives: list[LearningObjective] = Field(default_factory=list, max_length=20)
    acceptance_criteria: list[Criterion] = Field(min_length=1, max_length=MAX_CRITERIA)

    @model_validator(mode="before")
    @classmethod
    def number_criteria(cls, data: Any) -> Any:
        """Criteria without an `id` get c1, c2, … by position."""
        if isinstance(data, dict) and isinstance(data.get("acceptance_criteria"), list):
            criteria = [
                {"id": f"c{number}", **item} if isinstance(item, dict) and "id" not in item else item
                for number, item in enumerate(data["acceptance_criteria"], start=1)
            ]
            data = {**data, "acceptance_criteria": criteria}
        return data

    @model_validator(mode="after")
    def local_rules(self) -> TaskSpec:
        if self.type == "subtask" and self.parent is None:
            raise ValueError("a subtask needs a `parent` (the id of a top-level task)")
        if self.type == "task" and self.parent is not None:
            raise ValueError("only a subtask has a `parent`; set `type: subtask` or remove `parent`")
        if self.id in self.depends_on:
            raise ValueError("a task cannot depend on itself")
        if len(set(self.depends_on)) != len(self.depends_on):
            raise ValueError("depends_on lists the same task twice")
        ids = [criterion.id for criterion in self.acceptance_criteria]
        if len(set(ids)) != len(ids):
            raise ValueError(f"acceptance criterion ids must be unique in the task: {ids}")
        return self

    def content_hash(self, position: int) -> str:
        """Changes whenever anything stored for the task changes (its position included)."""
        canonical = json.dumps([position, self.model_dump(mode="json")], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


class ProjectInfo(_Spec):
    id: str = Field(pattern=ID_PATTERN)
    title: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=20_000)


class ProjectFile(_Spec):
    project: ProjectInfo
    tasks: list[TaskSpec] = Field(min_length=1, max_length=500)


def project_problems(project: ProjectFile) -> list[tuple[int, str]]:
    """(task index, message) for each rule broken across tasks; empty when the project is sound."""
    problems: list[tuple[int, str]] = []
    first_index: dict[str, int] = {}
    for index, task in enumerate(project.tasks):
        if task.id in first_index:
            problems.append((index, f"duplicate task id {task.id!r} (first used by task #{first_index[task.id] + 1})"))
        else:
            first_index[task.id] = index
    by_id = {task.id: task for task in project.tasks}
    for index, task in enumerate(project.tasks):
        for dependency in task.depends_on:
            if dependency not in by_id:
                problems.append(
                    (index, f"depends on unknown task {dependency!r}; known ids: {', '.join(sorted(by_id))}")
                )
        if task.parent is not None:
            parent = by_id.get(task.parent)
            if parent is None:
                problems.append((index, f"parent {task.parent!r} is not a task of this project"))
            elif parent.type != "task":
                problems.append((index, f"parent {task.parent!r} is a subtask; a parent must be a top-level task"))
    if not problems:
        cycle = dependency_cycle(project.tasks)
        if cycle:
            problems.append((first_index[cycle[0]], "dependency cycle: " + " -> ".join(cycle)))
    return problems


def dependency_cycle(tasks: list[TaskSpec]) -> list[str]:
    """One cycle as [a, b, …, a], or [] when the dependencies form a DAG (iterative DFS)."""
    edges = {task.id: task.depends_on for task in tasks}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for root in edges:
        if state.get(root):
            continue
        path: list[str] = [root]
        pending: list[list[str]] = [list(edges[root])]
        state[root] = 1
        while path:
            if not pending[-1]:
                state[path.pop()] = 2
                pending.pop()
                continue
            nxt = pending[-1].pop()
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                pending.append(list(edges.get(nxt, [])))
    return []
