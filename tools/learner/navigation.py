"""`get_ready`, `show_task`, `get_context`: find and read tasks, as the current learner sees them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from learner.progress import LearnerProject
from storage.learner_tasks import TaskRow, get_project, list_projects
from tools.base import (
    READ_ONLY_LOCAL,
    CommandBinding,
    ErrorCode,
    Need,
    Tool,
    ToolContext,
    ToolFailure,
    ToolInput,
    ToolOutput,
)
from tools.learner.common import (
    PROJECT_PATTERN,
    RESULT_ROLE,
    AttemptView,
    CriterionView,
    EventView,
    Objective,
    TaskRefInput,
    TaskSummary,
    attempts,
    comment_count,
    criteria_views,
    history,
    next_step,
    objectives,
    project_title,
    render_summary,
    resolve,
    summary,
)

CONTEXT_READY = 5
CONTEXT_ATTEMPTS = 3


# get_ready ---------------------------------------------------------------------------------


class GetReadyInput(ToolInput):
    project_id: str | None = Field(
        default=None, pattern=PROJECT_PATTERN, description="Only this project (default: all)."
    )
    task_type: Literal["task", "subtask"] | None = Field(default=None, description="Only tasks or only subtasks.")
    limit: int = Field(default=5, ge=1, le=20, description="At most this many tasks.")


class GetReadyOutput(ToolOutput):
    tasks: list[TaskSummary]
    total_ready: int
    message: str

    def render(self) -> str:
        return "\n".join([self.message, *(f"- {render_summary(task)}" for task in self.tasks)])


def get_ready(data: GetReadyInput, ctx: ToolContext) -> GetReadyOutput:
    if data.project_id is not None:
        if get_project(ctx.conn, data.project_id) is None:
            known = ", ".join(p.id for p in list_projects(ctx.conn)) or "none imported yet"
            raise ToolFailure(
                ErrorCode.NOT_FOUND,
                f"no project {data.project_id!r}; known projects: {known}. "
                "Call /get_ready without a project to see every project.",
            )
        project_ids = [data.project_id]
    else:
        project_ids = [project.id for project in list_projects(ctx.conn)]
    ready: list[tuple[LearnerProject, TaskRow]] = []
    for project_id in project_ids:
        state = LearnerProject.load(ctx.conn, ctx.user_id, project_id)
        ready += [(state, task) for task in state.ready(data.task_type)]
    ready.sort(key=lambda pair: pair[0].ready_order(pair[1]))  # across projects, in the one get_ready order
    shown = [summary(state, task) for state, task in ready[: data.limit]]
    in_progress = sum(1 for state, task in ready if state.status[task.id] == "in_progress")
    if not project_ids:
        message = "No task projects are imported yet; ask an instructor to run `python app.py import-tasks FILE`."
    elif not ready:
        message = (
            "No tasks are ready: everything is closed, waiting for review, or blocked. Use /show_task <id> for details."
        )
    else:
        more = f"; showing the first {len(shown)}" if len(ready) > len(shown) else ""
        message = f"{len(ready)} tasks ready ({in_progress} in progress){more}. Start one with /start_task <id>."
    return GetReadyOutput(tasks=shown, total_ready=len(ready), message=message)


# show_task ---------------------------------------------------------------------------------


class ShowTaskInput(TaskRefInput):
    pass


class ShowTaskOutput(ToolOutput):
    id: str
    project_id: str
    title: str
    description: str
    task_type: str
    priority: int
    status: str
    parent_id: str | None
    children: list[TaskSummary]
    dependencies: list[TaskSummary]
    blocked_by: list[str]
    blocks: list[TaskSummary]
    learning_objectives: list[Objective]
    acceptance_criteria: list[CriterionView]
    submission_count: int
    latest_result: str | None
    history: list[EventView]
    next_step: str

    def render(self) -> str:
        lines = [
            f"{self.project_id}/{self.id}: {self.title} ({self.task_type}, P{self.priority}, status {self.status})"
        ]
        if self.description:
            lines += ["", self.description.strip(), ""]
        if self.learning_objectives:
            lines.append("Objectives: " + "; ".join(f"{o.level}: {o.description}" for o in self.learning_objectives))
        lines.append("Acceptance criteria:")
        lines += [f"- {c.id} [{c.type}] {c.description}" for c in self.acceptance_criteria]
        if self.dependencies:
            lines.append("Depends on: " + ", ".join(f"{d.id} ({d.status})" for d in self.dependencies))
        if self.children:
            lines.append("Subtasks: " + ", ".join(f"{c.id} ({c.status})" for c in self.children))
        lines.append(
            f"Attempts: {self.submission_count}" + (f", latest {self.latest_result}" if self.latest_result else "")
        )
        lines.append(f"Next: {self.next_step}")
        return "\n".join(lines)


def show_task(data: ShowTaskInput, ctx: ToolContext) -> ShowTaskOutput:
    state, task = resolve(ctx, data.task_id)
    tried = attempts(ctx, task)
    dependencies = [dep for dep in (state.task(task_id) for task_id in task.dependencies) if dep is not None]
    return ShowTaskOutput(
        id=task.id,
        project_id=task.project_id,
        title=task.title,
        description=task.description,
        task_type=task.task_type,
        priority=task.priority,
        status=state.status[task.id],
        parent_id=task.parent_id,
        children=[summary(state, child) for child in state.children(task)],
        dependencies=[summary(state, dep) for dep in dependencies],
        blocked_by=[dep.id for dep in state.blocked_by(task)],
        blocks=[summary(state, other) for other in state.blocks(task)],
        learning_objectives=objectives(task),
        acceptance_criteria=criteria_views(task),
        submission_count=len(tried),
        latest_result=tried[-1].result if tried else None,
        history=history(ctx, task),
        next_step=next_step(state, task),
    )


# get_context -------------------------------------------------------------------------------


class GetContextInput(TaskRefInput):
    pass


class ProjectProgress(BaseModel):
    closed: int
    total: int
    percentage: float


class GetContextOutput(ToolOutput):
    learner_id: int
    project_id: str
    project_title: str
    current_task: TaskSummary
    description: str
    hierarchy: list[TaskSummary]
    blocked_by: list[str]
    ready_tasks: list[TaskSummary]
    progress: ProjectProgress
    acceptance_criteria: list[CriterionView]
    learning_objectives: list[Objective]
    recent_attempts: list[AttemptView]
    comments: int
    next_step: str

    def render(self) -> str:
        task = self.current_task
        path = " > ".join([self.project_title, *(t.title for t in self.hierarchy), task.title])
        lines = [path, f"Status: {task.status}; project progress {self.progress.closed}/{self.progress.total} closed"]
        if self.description:
            lines += ["", self.description.strip(), ""]
        lines.append("Acceptance criteria:")
        lines += [f"- {c.id} [{c.type}] {c.description}" for c in self.acceptance_criteria]
        for attempt in self.recent_attempts:
            lines.append(f"Attempt {attempt.attempt}: {attempt.result}")
        if self.comments:
            lines.append(f"{self.comments} comments: /get_comments {task.id}")
        lines.append(f"Next: {self.next_step}")
        return "\n".join(lines)


def build_context(ctx: ToolContext, state: LearnerProject, task: TaskRow) -> GetContextOutput:
    ancestors: list[TaskSummary] = []
    parent_id = task.parent_id
    while parent_id is not None and (parent := state.task(parent_id)) is not None and len(ancestors) < 10:
        ancestors.insert(0, summary(state, parent))
        parent_id = parent.parent_id
    total = len(state.tasks)
    closed = state.closed_count()
    return GetContextOutput(
        learner_id=ctx.user_id,
        project_id=task.project_id,
        project_title=project_title(ctx, task.project_id),
        current_task=summary(state, task),
        description=task.description,
        hierarchy=ancestors,
        blocked_by=[dep.id for dep in state.blocked_by(task)],
        ready_tasks=[summary(state, other) for other in state.ready()[:CONTEXT_READY]],
        progress=ProjectProgress(
            closed=closed, total=total, percentage=round(100 * closed / total, 1) if total else 0.0
        ),
        acceptance_criteria=criteria_views(task),
        learning_objectives=objectives(task),
        recent_attempts=attempts(ctx, task, last=CONTEXT_ATTEMPTS),
        comments=comment_count(ctx, task),
        next_step=next_step(state, task),
    )


def get_context(data: GetContextInput, ctx: ToolContext) -> GetContextOutput:
    state, task = resolve(ctx, data.task_id)
    return build_context(ctx, state, task)


GET_READY_TOOL = Tool(
    name="get_ready",
    annotations=READ_ONLY_LOCAL,  # served over /mcp
    description="List the learner's tasks that can be worked on now (in progress first, then priority, then age); "
    "blocked, closed and waiting-for-review tasks are left out.",
    input_model=GetReadyInput,
    output_model=GetReadyOutput,
    handler=get_ready,
    result_role=RESULT_ROLE,
    needs=frozenset({Need.COURSE}),
    command=CommandBinding(
        name="get_ready", usage="/get_ready [project_id]", example="/get_ready intro_python", args_field="project_id"
    ),
    error_style="task",
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)

SHOW_TASK_TOOL = Tool(
    name="show_task",
    annotations=READ_ONLY_LOCAL,  # served over /mcp
    description="Show one task: description, objectives, acceptance criteria, dependencies, the learner's status and attempts.",
    input_model=ShowTaskInput,
    output_model=ShowTaskOutput,
    handler=show_task,
    result_role=RESULT_ROLE,
    needs=frozenset({Need.COURSE}),
    command=CommandBinding(
        name="show_task", usage="/show_task <task_id>", example="/show_task hello_world", args_field="task_id"
    ),
    error_style="task",
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)

GET_CONTEXT_TOOL = Tool(
    name="get_context",
    annotations=READ_ONLY_LOCAL,  # served over /mcp
    description="Everything needed to coach the learner on one task: where it sits, progress, criteria, recent attempts, next step.",
    input_model=GetContextInput,
    output_model=GetContextOutput,
    handler=get_context,
    result_role=RESULT_ROLE,
    needs=frozenset({Need.COURSE}),
    command=CommandBinding(
        name="get_context", usage="/get_context <task_id>", example="/get_context loops", args_field="task_id"
    ),
    error_style="task",
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)
