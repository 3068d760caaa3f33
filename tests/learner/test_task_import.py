"""`python app.py import-tasks FILE`: the validator (each error names the task and line),
all-or-nothing writes, idempotency, updates that keep progress, and the shipped example."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from learner import importer
from learner.importer import TaskFileError, import_task_file, read_task_file
from storage.db import Database
from tests.task_support import PROJECT, Classroom, project

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tasks" / "intro_python.yaml"


def write(tmp_path: Path, data, name: str = "project.yaml") -> Path:
    path = tmp_path / name
    text = json.dumps(data, indent=2) if name.endswith(".json") else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


def line_of(path: Path, needle: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), start=1) if needle in line)


def table_dump(conn: sqlite3.Connection) -> list[tuple]:
    return [tuple(row) for row in conn.execute("SELECT * FROM tasks ORDER BY pk")] + [
        tuple(row) for row in conn.execute("SELECT * FROM task_projects")
    ]


# the validator -----------------------------------------------------------------------------


def _crit(**fields):
    return {"acceptance_criteria": [fields]}


@pytest.mark.parametrize(
    "changes, task_id, expected",
    [
        ({"sql_query": {"depends_on": ["basic"]}}, "sql_query", "depends on unknown task 'basic'"),
        ({"basics": {"depends_on": ["sql_query"]}}, "basics", "dependency cycle: basics -> sql_query -> basics"),
        ({"basics": {"id": "sql_query"}}, "sql_query", "duplicate task id 'sql_query'"),
        ({"essay_intro": {"parent": "ghost"}}, "essay_intro", "parent 'ghost' is not a task of this project"),
        ({"essay_intro": {"parent": None}}, "essay_intro", "a subtask needs a `parent`"),
        ({"basics": {"depends_on": ["basics"]}}, "basics", "cannot depend on itself"),
        ({"basics": _crit(type="quiz", description="?")}, "basics", "acceptance_criteria.0"),
        ({"basics": _crit(type="text_match", description="d", pattern="(unclosed")}, "basics", "not a valid regex"),
        (
            {
                "basics": _crit(
                    type="sql_result",
                    description="d",
                    setup_sql="CREATE TABL x",
                    expected_columns=["a"],
                    expected_rows=[],
                )
            },
            "basics",
            "setup_sql does not run on SQLite",
        ),
        (
            {"basics": _crit(type="sql_result", description="d", expected_columns=["a", "b"], expected_rows=[[1]])},
            "basics",
            "expected_rows[1] has 1 values but there are 2 columns",
        ),
        ({"basics": _crit(type="code_test", description="d", cases=[])}, "basics", "cases"),
        (
            {"basics": _crit(type="code_test", description="d", language="cobol", cases=[{"expected_stdout": "1"}])},
            "basics",
            "language",
        ),
        ({"basics": {"acceptance_criteria": []}}, "basics", "acceptance_criteria"),
        ({"basics": {"title": ""}}, "basics", "title"),
        ({"basics": {"priority": 9}}, "basics", "priority"),
        ({"basics": {"colour": "red"}}, "basics", "colour"),
    ],
)
def test_each_invalid_project_is_refused_naming_the_task_and_line(tmp_path, changes, task_id, expected):
    path = write(tmp_path, project(**changes))
    with pytest.raises(TaskFileError) as caught:
        read_task_file(path)
    problem = next((p for p in caught.value.problems if expected in p), None)
    assert problem is not None, caught.value.problems
    assert problem.startswith(f"{path}:") and f"task '{task_id}'" in problem
    line = int(problem.split(":")[1])
    assert line >= line_of(path, f"id: {task_id}")  # the task's own line, or a line inside it


def test_line_numbers_point_at_the_offending_task(tmp_path):
    path = write(tmp_path, project(sql_query={"depends_on": ["basic"]}))
    with pytest.raises(TaskFileError) as caught:
        read_task_file(path)
    assert caught.value.problems == [
        f"{path}:{line_of(path, '- id: sql_query')}: task 'sql_query': depends on unknown task 'basic'; "
        "known ids: basics, essay, essay_intro, program, sql_query, warmup"
    ]


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("bad.yaml", "project: [unclosed\n", "bad.yaml:2: invalid YAML"),
        ("bad.json", '{"project": {}\n, }', "bad.json:2: invalid JSON"),
        ("list.yaml", "- 1\n- 2\n", "must hold a mapping"),
        ("tasks.txt", "x", "use a .yaml, .yml or .json file"),
        ("empty.yaml", "project: {id: p, title: P}\ntasks: []\n", "tasks: List should have at least 1 item"),
    ],
)
def test_unreadable_files(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TaskFileError) as caught:
        read_task_file(path)
    assert expected in caught.value.problems[0]


def test_every_problem_is_reported_at_once(tmp_path):
    path = write(tmp_path, project(basics={"title": ""}, warmup={"priority": -1}))
    with pytest.raises(TaskFileError) as caught:
        read_task_file(path)
    assert len(caught.value.problems) == 2


def test_json_files_are_accepted(tmp_path):
    path = write(tmp_path, PROJECT, "project.json")
    assert [task.id for task in read_task_file(path).tasks][:2] == ["basics", "sql_query"]
    bad = write(tmp_path, project(warmup={"depends_on": ["nope"]}), "bad.json")
    with pytest.raises(TaskFileError) as caught:
        read_task_file(bad)
    opening = line_of(bad, '"id": "warmup"') - 1  # the line of the task's `{`
    assert f":{opening}: task 'warmup'" in caught.value.problems[0]


# writing -----------------------------------------------------------------------------------


def test_import_is_idempotent_for_an_unchanged_file(tmp_path):
    room = Classroom(tmp_path)
    path = write(tmp_path, PROJECT)
    before = table_dump(room.conn)
    report = import_task_file(room.conn, path)
    assert (report.changed, len(report.unchanged)) == (False, 6)
    assert table_dump(room.conn) == before


def test_a_changed_file_updates_tasks_and_keeps_progress(tmp_path):
    room = Classroom(tmp_path)
    room.close_task("basics", "yes")
    room.ok("add_comment", task_id="warmup", text="my note")
    changed = project(basics={"title": "The basics"}, warmup=None, program={"depends_on": []})
    report = import_task_file(room.conn, write(tmp_path, changed))
    assert (report.updated, report.retired, report.created) == (["basics", "program"], ["warmup"], [])
    shown = room.ok("show_task", task_id="basics")
    assert (shown["title"], shown["status"], shown["submission_count"]) == ("The basics", "closed", 1)
    assert room.call("show_task", task_id="warmup").error_code == "NOT_FOUND"
    back = import_task_file(room.conn, write(tmp_path, PROJECT))
    assert back.updated == ["basics", "warmup", "program"]
    assert [c["text"] for c in room.ok("get_comments", task_id="warmup")["comments"]] == ["my note"]


def test_a_failure_mid_import_writes_nothing(tmp_path, monkeypatch):
    room = Classroom(tmp_path)
    before = table_dump(room.conn)
    calls = []
    real = importer.save_task

    def failing(conn, project_id, values):
        calls.append(values["id"])
        if len(calls) == 3:
            raise sqlite3.OperationalError("disk I/O error")
        real(conn, project_id, values)

    monkeypatch.setattr(importer, "save_task", failing)
    with pytest.raises(sqlite3.OperationalError):
        import_task_file(room.conn, write(tmp_path, project(**{t["id"]: {"title": "new"} for t in PROJECT["tasks"]})))
    assert len(calls) == 3 and table_dump(room.conn) == before


def test_an_invalid_file_writes_nothing(tmp_path):
    database = Database(tmp_path / "x.db")
    database.migrate()
    with database.connection() as conn:
        with pytest.raises(TaskFileError):
            import_task_file(conn, write(tmp_path, project(program={"depends_on": ["ghost"]})))
        assert conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM task_projects").fetchone()[0] == 0


def test_migration_creates_the_task_tables(tmp_path):
    database = Database(tmp_path / "m.db")
    database.migrate()
    expected = {
        "tasks": {
            "pk",
            "project_id",
            "id",
            "title",
            "description",
            "task_type",
            "parent_id",
            "dependencies",
            "priority",
            "learning_objectives",
            "acceptance_criteria",
            "position",
            "content_hash",
            "retired",
            "created_at",
            "updated_at",
        },
        "task_progress": {"learner_id", "task_pk", "status", "created_at", "updated_at"},
        "task_attempts": {
            "id",
            "learner_id",
            "task_pk",
            "attempt",
            "answer",
            "result",
            "checks",
            "reviewed_by",
            "review_note",
            "reviewed_at",
            "created_at",
        },
        "task_comments": {"id", "task_pk", "learner_id", "author_id", "text", "created_at"},
        "task_events": {
            "id",
            "learner_id",
            "task_pk",
            "actor_id",
            "action",
            "from_status",
            "to_status",
            "reason",
            "created_at",
        },
        "help_requests": {
            "id",
            "learner_id",
            "task_pk",
            "message",
            "status",
            "created_at",
            "resolved_by",
            "resolved_at",
        },
    }
    with database.connection() as conn:
        for table, columns in expected.items():
            assert {row[1] for row in conn.execute(f"PRAGMA table_info({table})")} == columns


# the shipped example and the CLI -----------------------------------------------------------


def test_example_project_is_valid_and_uses_every_criterion_type():
    example = read_task_file(EXAMPLE)
    assert len(example.tasks) >= 10
    types = {criterion.type for task in example.tasks for criterion in task.acceptance_criteria}
    assert types == {"code_test", "sql_result", "text_match", "manual"}


def test_cli_imports_reimports_and_refuses_with_exit_code_1(tmp_path, base_settings):
    from tests.process_support import clean_env

    env = clean_env(tmp_path, base_settings)

    def run(*args):
        return subprocess.run(
            [sys.executable, "app.py", "import-tasks", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    first = run(str(EXAMPLE))
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "project intro_python: 15 created, 0 updated, 0 unchanged, 0 retired"
    assert "0 created, 0 updated, 15 unchanged" in run(str(EXAMPLE)).stdout
    bad = run(str(write(tmp_path, project(basics={"depends_on": ["sql_query"]}))))
    assert bad.returncode == 1
    assert "dependency cycle" in bad.stderr and "nothing was imported" in bad.stderr
    with Database(base_settings["database_path"]).connection() as conn:
        assert conn.execute("SELECT COUNT(*) FROM task_projects").fetchone()[0] == 1
