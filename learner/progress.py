"""The per-learner state machine, and the blocking and ordering rules of SPEC section 10.

Statuses (a learner with no progress row on a task is `open`):

    open --start--> in_progress --submit, passed--> closed --go_back(reason)--> in_progress
                    in_progress --start (again)--> in_progress (a no-op: the learner resumes)
                    in_progress --submit, failed--> in_progress
                    in_progress --submit, a manual criterion--> submitted
    submitted --review_pass--> closed     submitted --review_reject--> in_progress
    submitted --submit (again)--> closed / in_progress / submitted, by the new attempt's result

A task closes only through a passing attempt (all automatic criteria passed and, when it
has `manual` criteria, an instructor's approval). A task is blocked for a learner while
any of its dependencies is not `closed` for that same learner; a blocked task cannot be
started or submitted, and `get_ready` leaves it out. Ready tasks are ordered in_progress
first, then priority (0 first), then age (oldest template first, then file order).

`TRANSITIONS` is the one table of allowed changes and `move` the one function that applies
one (the task tools and the instructor's review both call it); a caller never writes a
status itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from storage.connection import DbConnection
from storage.learner_tasks import TaskRow, project_tasks, set_status, statuses

Status = Literal["open", "in_progress", "submitted", "closed"]
Action = Literal["start", "submit_passed", "submit_failed", "submit_pending", "review_pass", "review_reject", "go_back"]

TRANSITIONS: dict[tuple[Action, str], Status] = {
    ("start", "open"): "in_progress",
    ("start", "in_progress"): "in_progress",
    ("submit_passed", "in_progress"): "closed",
    ("submit_passed", "submitted"): "closed",
    ("submit_failed", "in_progress"): "in_progress",
    ("submit_failed", "submitted"): "in_progress",
    ("submit_pending", "in_progress"): "submitted",
    ("submit_pending", "submitted"): "submitted",
    ("review_pass", "submitted"): "closed",
    ("review_reject", "submitted"): "in_progress",
    ("go_back", "closed"): "in_progress",
}
SUBMIT_ACTIONS: dict[str, Action] = {
    "passed": "submit_passed",
    "failed": "submit_failed",
    "pending_review": "submit_pending",
}
AUDIT_NAMES: dict[Action, str] = {  # the `action` column of the audit trail (task_events)
    "start": "start",
    "submit_passed": "submit",
    "submit_failed": "submit",
    "submit_pending": "submit",
    "review_pass": "review",
    "review_reject": "review",
    "go_back": "go_back",
}


def next_status(action: Action, current: str) -> Status | None:
    """The status after `action`, or None when the action is not allowed from `current`."""
    return TRANSITIONS.get((action, current))


def can_submit(current: str) -> bool:
    """Whether a submission is taken from `current` at all (its grade then picks the next status).

    Asked before grading, which runs outside the write transaction; `move` asks again under it.
    """
    return all(next_status(action, current) is not None for action in SUBMIT_ACTIONS.values())


@dataclass(frozen=True)
class Moved:
    """An allowed change; `audit_id` is None when the status stayed what it was (nothing written)."""

    old: str
    new: Status
    audit_id: int | None


@dataclass(frozen=True)
class Refused:
    """`action` is not allowed from the learner's `current` status; nothing was written."""

    action: Action
    current: str


def move(
    conn: DbConnection,
    *,
    learner_id: int,
    task_pk: int,
    action: Action,
    actor_id: int | None = None,
    reason: str | None = None,
) -> Moved | Refused:
    """Apply `action` to one learner's status on one task, inside the caller's write transaction.

    The status is read here, under the caller's write lock, so two racing calls cannot both
    apply. A change writes the new status and its audit event; a no-op (resume, a failed
    resubmission) writes nothing.
    """
    current = statuses(conn, learner_id, [task_pk])[task_pk]
    new = next_status(action, current)
    if new is None:
        return Refused(action=action, current=current)
    if new == current:
        return Moved(old=current, new=new, audit_id=None)
    audit_id = set_status(
        conn,
        learner_id=learner_id,
        task_pk=task_pk,
        old=current,
        new=new,
        action=AUDIT_NAMES[action],
        actor_id=actor_id,
        reason=reason,
    )
    return Moved(old=current, new=new, audit_id=audit_id)


@dataclass(frozen=True)
class LearnerProject:
    """One learner's view of one project: live tasks, their statuses, what blocks what."""

    tasks: list[TaskRow]
    status: dict[str, str]  # task id -> status

    @classmethod
    def load(cls, conn: DbConnection, learner_id: int, project_id: str) -> LearnerProject:
        tasks = project_tasks(conn, project_id)
        by_pk = statuses(conn, learner_id, [task.pk for task in tasks])
        return cls(tasks=tasks, status={task.id: by_pk[task.pk] for task in tasks})

    def task(self, task_id: str) -> TaskRow | None:
        return next((task for task in self.tasks if task.id == task_id), None)

    def blocked_by(self, task: TaskRow) -> list[TaskRow]:
        """Dependencies not closed for this learner (a retired dependency no longer blocks)."""
        return [
            dep
            for dep in (self.task(task_id) for task_id in task.dependencies)
            if dep is not None and self.status[dep.id] != "closed"
        ]

    def blocks(self, task: TaskRow) -> list[TaskRow]:
        return [other for other in self.tasks if task.id in other.dependencies]

    def children(self, task: TaskRow) -> list[TaskRow]:
        return [other for other in self.tasks if other.parent_id == task.id]

    def ready(self, task_type: str | None = None) -> list[TaskRow]:
        """Open or in-progress, unblocked tasks in `get_ready` order."""
        found = [
            task
            for task in self.tasks
            if self.status[task.id] in ("open", "in_progress")
            and not self.blocked_by(task)
            and (task_type is None or task.task_type == task_type)
        ]
        return sorted(found, key=self.ready_order)

    def ready_order(self, task: TaskRow) -> tuple[bool, int, str, int, str]:
        """The `get_ready` order: in_progress first, then priority (0 first), age, file position, project."""
        return self.status[task.id] != "in_progress", task.priority, task.created_at, task.position, task.project_id

    def closed_count(self) -> int:
        return sum(1 for status in self.status.values() if status == "closed")
