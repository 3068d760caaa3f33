"""`python app.py import-tasks FILE`: read a YAML or JSON project, validate it, write it once.

Every problem is reported as `FILE:LINE: task 'id': what is wrong`, all of them at once, and
nothing is written unless the whole file is valid; the write is one transaction. Importing
an unchanged file writes nothing. A changed file updates the changed templates in place
(same rows, so learners' progress, attempts and comments stay attached); a task that left
the file is retired (hidden from the tools, progress kept) and comes back if re-added.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from learner.spec import ProjectFile, TaskSpec, project_problems
from storage.connection import DbConnection
from storage.db import transaction
from storage.learner_tasks import get_project, project_tasks, retire_tasks, save_project, save_task

MAX_FILE_BYTES = 5 * 1024 * 1024


class TaskFileError(Exception):
    """The task file cannot be imported; `problems` holds one line per problem."""

    def __init__(self, path: str, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.path = path
        self.problems = problems


@dataclass(frozen=True)
class ImportReport:
    project_id: str
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.retired)

    def summary(self) -> str:
        return (
            f"project {self.project_id}: {len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged, {len(self.retired)} retired"
        )


def import_task_file(conn: DbConnection, path: str | Path) -> ImportReport:
    """Validate the file and import it; raises `TaskFileError` (nothing written) when invalid."""
    return import_project(conn, read_task_file(path))


def read_task_file(path: str | Path) -> ProjectFile:
    path = Path(path)
    name = str(path)
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise TaskFileError(name, [f"{name}: use a .yaml, .yml or .json file"])
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise TaskFileError(name, [f"{name}: larger than {MAX_FILE_BYTES // 1024 // 1024} MB"])
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TaskFileError(name, [f"{name}: cannot read the file: {error}"]) from None
    data = _parse(name, text, json_file=path.suffix.lower() == ".json")
    nodes = _node_tree(text)
    try:
        project = ProjectFile.model_validate(data)
    except ValidationError as error:
        raise TaskFileError(name, [_describe(name, data, nodes, item) for item in error.errors()]) from None
    problems = project_problems(project)
    if problems:
        raw_tasks = data["tasks"]
        raise TaskFileError(
            name,
            [
                f"{name}:{_line(nodes, ('tasks', index))}: task {raw_tasks[index].get('id')!r}: {message}"
                for index, message in problems
            ],
        )
    return project


def import_project(conn: DbConnection, project: ProjectFile) -> ImportReport:
    """Write the project in one transaction; an unchanged project writes nothing."""
    source_hash = hashlib.sha256(project.model_dump_json().encode()).hexdigest()
    info = project.project
    stored = get_project(conn, info.id)
    if stored is not None and stored.source_hash == source_hash:
        return ImportReport(info.id, unchanged=[task.id for task in project.tasks])
    report = ImportReport(info.id)
    with transaction(conn):
        existing = {row.id: row for row in project_tasks(conn, info.id, include_retired=True)}
        save_project(conn, info.id, info.title, info.description, source_hash)
        for position, task in enumerate(project.tasks):
            digest = task.content_hash(position)
            row = existing.get(task.id)
            if row is not None and row.content_hash == digest and not row.retired:
                report.unchanged.append(task.id)
                continue
            save_task(conn, info.id, _template(task, position, digest))
            (report.updated if row is not None else report.created).append(task.id)
        listed = {task.id for task in project.tasks}
        gone = [task_id for task_id, row in existing.items() if task_id not in listed and not row.retired]
        retire_tasks(conn, info.id, gone)
        report.retired.extend(gone)
    return report


def _template(task: TaskSpec, position: int, digest: str) -> dict[str, Any]:
    dumped = task.model_dump(mode="json")
    return {
        "id": task.id,
        "title": task.title,
        "description": task.description,
        "task_type": task.type,
        "parent_id": task.parent,
        "dependencies": task.depends_on,
        "priority": task.priority,
        "learning_objectives": dumped["learning_objectives"],
        "acceptance_criteria": dumped["acceptance_criteria"],
        "position": position,
        "content_hash": digest,
    }


def _parse(name: str, text: str, *, json_file: bool) -> Any:
    try:
        data = json.loads(text) if json_file else yaml.safe_load(text)
    except json.JSONDecodeError as error:
        raise TaskFileError(name, [f"{name}:{error.lineno}: invalid JSON: {error.msg}"]) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(error, "problem", None) or str(error)
        raise TaskFileError(name, [f"{name}:{line}: invalid YAML: {problem}"]) from None
    if not isinstance(data, dict):
        raise TaskFileError(name, [f"{name}:1: the file must hold a mapping with `project` and `tasks`"])
    return data


def _node_tree(text: str) -> yaml.Node | None:
    """The YAML node tree (JSON is YAML too), used only to find line numbers."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def _line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    """Line of the deepest node the pydantic location reaches (parts it cannot follow are skipped)."""
    node, line = root, 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((value for key, value in node.value if getattr(key, "value", None) == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            match = node.value[part]
        else:
            match = None
        if match is not None:
            node = match
            line = node.start_mark.line + 1
    return line


def _describe(name: str, data: Any, nodes: yaml.Node | None, item: Any) -> str:
    loc = tuple(item["loc"])
    where = ".".join(str(part) for part in loc) or "file"
    subject = ""
    if len(loc) >= 2 and loc[0] == "tasks" and isinstance(loc[1], int):
        raw = data.get("tasks")[loc[1]] if isinstance(data.get("tasks"), list) else None
        task_id = raw.get("id") if isinstance(raw, dict) else None
        subject = f"task {task_id!r}: " if task_id else f"task #{loc[1] + 1}: "
        where = ".".join(str(part) for part in loc[2:]) or "task"
    message = str(item["msg"]).removeprefix("Value error, ")
    return f"{name}:{_line(nodes, loc)}: {subject}{where}: {message}"
