"""A temp database with a small task project, two learners and an instructor.

Shared by the `test_task_*.py` files. Tool calls go through the real runner (`run_tool`),
so validation, scoping and error codes are the production ones.

The project (P = priority, -> = depends on):

    basics      P1  text_match /^yes$/i (full match)
    sql_query   P0  -> basics, sql_result
    essay       P2  manual
    essay_intro P1  subtask of essay, text_match /intro/
    warmup      P3  text_match /warm/
    program     P2  -> warmup, code_test (python, judge)
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from learner.importer import import_project
from learner.spec import ProjectFile
from storage.users import create_user
from tests.store_support import TwoUserStore
from tools.base import Tool, ToolContext, ToolResult
from tools.learner import TASK_TOOLS
from tools.runner import run_tool

TOOLS: dict[str, Tool[Any, Any]] = {tool.name: tool for tool in TASK_TOOLS}

SQL_SETUP = (
    "CREATE TABLE pets (name TEXT, kind TEXT); INSERT INTO pets VALUES ('Rex', 'dog'), ('Tom', 'cat'), ('Fido', 'dog');"
)
SQL_ANSWER = "SELECT name FROM pets WHERE kind = 'dog'"
SUM_PROGRAM = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"

PROJECT: dict[str, Any] = {
    "project": {"id": "course", "title": "Test course", "description": "for tests"},
    "tasks": [
        {
            "id": "basics",
            "title": "Basics",
            "priority": 1,
            "description": "Say yes.",
            "learning_objectives": [{"level": "remember", "description": "say yes"}],
            "acceptance_criteria": [
                {
                    "type": "text_match",
                    "description": "the answer is yes",
                    "pattern": "yes",
                    "mode": "fullmatch",
                    "ignore_case": True,
                }
            ],
        },
        {
            "id": "sql_query",
            "title": "Dogs",
            "priority": 0,
            "depends_on": ["basics"],
            "acceptance_criteria": [
                {
                    "type": "sql_result",
                    "description": "names of dogs",
                    "setup_sql": SQL_SETUP,
                    "expected_columns": ["name"],
                    "expected_rows": [["Rex"], ["Fido"]],
                }
            ],
        },
        {
            "id": "essay",
            "title": "Essay",
            "priority": 2,
            "acceptance_criteria": [{"type": "manual", "description": "a thoughtful essay", "rubric": "be kind"}],
        },
        {
            "id": "essay_intro",
            "title": "Essay intro",
            "type": "subtask",
            "parent": "essay",
            "priority": 1,
            "acceptance_criteria": [{"type": "text_match", "description": "mentions intro", "pattern": "intro"}],
        },
        {
            "id": "warmup",
            "title": "Warm-up",
            "priority": 3,
            "acceptance_criteria": [{"type": "text_match", "description": "says warm", "pattern": "warm"}],
        },
        {
            "id": "program",
            "title": "Sum",
            "priority": 2,
            "depends_on": ["warmup"],
            "acceptance_criteria": [
                {
                    "type": "code_test",
                    "description": "prints the sum",
                    "language": "python",
                    "cases": [
                        {"name": "small", "stdin": "1 2 3\n", "expected_stdout": "6\n"},
                        {"name": "empty", "stdin": "", "expected_stdout": "0\n"},
                    ],
                }
            ],
        },
    ],
}


def project(**changes: Any) -> dict[str, Any]:
    """A deep copy of PROJECT; `changes` maps a task id to fields to replace (None deletes the task)."""
    data = copy.deepcopy(PROJECT)
    tasks = []
    for task in data["tasks"]:
        if task["id"] in changes:
            if changes[task["id"]] is None:
                continue
            task.update(changes[task["id"]])
        tasks.append(task)
    data["tasks"] = tasks
    return data


class Classroom(TwoUserStore):
    """Alice and Bob (learners) and Tess (instructor) on a database holding PROJECT."""

    def __init__(self, tmp_path: Path, judge: Any = None) -> None:
        super().__init__(tmp_path, "tasks.db")
        self.tess = create_user(self.conn, "tess", role="instructor")[0].id
        self.judge = judge
        import_project(self.conn, ProjectFile.model_validate(PROJECT))

    def ctx(self, user: int) -> ToolContext:
        return ToolContext(
            conn=self.conn, database=self.database, settings=self.settings, user_id=user, judge=self.judge
        )

    def call(self, name: str, user: int | None = None, **data: Any) -> ToolResult:
        return run_tool(TOOLS[name], data, self.ctx(self.alice if user is None else user))

    def ok(self, name: str, user: int | None = None, **data: Any) -> dict[str, Any]:
        result = self.call(name, user, **data)
        assert result.ok, f"{name} failed: {result.error_code}: {result.message}"
        assert result.output is not None
        return result.output

    def close_task(self, task_id: str, answer: str, user: int | None = None) -> dict[str, Any]:
        self.ok("start_task", user, task_id=task_id)
        out = self.ok("submit", user, task_id=task_id, answer=answer)
        assert out["new_status"] == "closed", out
        return out
