"""`add_comment`, `get_comments`, `go_back`, `request_help`.

Comments: a learner's comments are private to that learner; shared comments (no learner)
are written by instructors (`shared: true`, instructor or admin role only) and seen by all.
A learner never sees another learner's private comments.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field

from learner.progress import Refused, move
from learner.roles import is_staff
from storage.db import transaction
from storage.learner_tasks import add_comment as store_comment
from storage.learner_tasks import add_help_request, open_help_request, visible_comments
from storage.users import get_user
from tools.base import (
    READ_ONLY_LOCAL,
    CommandBinding,
    ErrorCode,
    Need,
    Tool,
    ToolContext,
    ToolFailure,
    ToolHints,
    ToolOutput,
)
from tools.learner.common import RESULT_ROLE, TaskRefInput, TaskTextInput, resolve

# comments ----------------------------------------------------------------------------------


class AddCommentInput(TaskTextInput):
    text_field: ClassVar[str] = "text"
    text: str = Field(min_length=1, max_length=4000, description="The comment (a note, a question, feedback).")
    shared: bool = Field(default=False, description="Instructors only: visible to every learner.")


class CommentOutput(ToolOutput):
    id: int
    task_id: str
    author: str
    text: str
    shared: bool
    created_at: str

    def render(self) -> str:
        kind = "shared comment" if self.shared else "private note"
        return f"Saved {kind} #{self.id} on {self.task_id}: {self.text}"


def add_comment(data: AddCommentInput, ctx: ToolContext) -> CommentOutput:
    _, task = resolve(ctx, data.task_id)
    author = get_user(ctx.conn, ctx.user_id)
    if data.shared and (author is None or not is_staff(author.role)):
        raise ToolFailure(
            ErrorCode.PERMISSION_DENIED,
            "only instructors can write shared comments; leave `shared` out to save a private comment.",
        )
    comment_id = store_comment(
        ctx.conn,
        task_pk=task.pk,
        author_id=ctx.user_id,
        learner_id=None if data.shared else ctx.user_id,
        text=data.text,
    )
    comments, _ = visible_comments(ctx.conn, task.pk, ctx.user_id, 1)
    return CommentOutput(
        id=comment_id,
        task_id=task.id,
        author=author.name if author else "",
        text=data.text,
        shared=data.shared,
        created_at=comments[-1].created_at,
    )


class GetCommentsInput(TaskRefInput):
    limit: int = Field(default=10, ge=1, le=50, description="At most this many of the newest comments.")


class CommentView(BaseModel):
    id: int
    author: str
    text: str
    shared: bool
    created_at: str


class GetCommentsOutput(ToolOutput):
    task_id: str
    comments: list[CommentView]
    total: int

    def render(self) -> str:
        if not self.comments:
            return f"No comments on {self.task_id} yet. Add one with /add_comment {self.task_id} <text>."
        lines = [f"{len(self.comments)} of {self.total} comments on {self.task_id} (oldest first):"]
        lines += [
            f"- #{c.id} {c.author}{' (shared)' if c.shared else ''}, {c.created_at}: {c.text}" for c in self.comments
        ]
        return "\n".join(lines)


def get_comments(data: GetCommentsInput, ctx: ToolContext) -> GetCommentsOutput:
    _, task = resolve(ctx, data.task_id)
    rows, total = visible_comments(ctx.conn, task.pk, ctx.user_id, data.limit)
    comments = [
        CommentView(id=r.id, author=r.author, text=r.text, shared=r.learner_id is None, created_at=r.created_at)
        for r in rows
    ]
    return GetCommentsOutput(task_id=task.id, comments=comments, total=total)


# go_back -----------------------------------------------------------------------------------


class GoBackInput(TaskTextInput):
    text_field: ClassVar[str] = "reason"
    reason: str = Field(
        min_length=3, max_length=1000, description="Why the closed task is reopened (kept in the audit trail)."
    )


class GoBackOutput(ToolOutput):
    task_id: str
    project_id: str
    old_status: str
    new_status: str
    reason: str
    audit_id: int
    message: str

    def render(self) -> str:
        return self.message


def go_back(data: GoBackInput, ctx: ToolContext) -> GoBackOutput:
    _, task = resolve(ctx, data.task_id)
    with transaction(ctx.conn):
        moved = move(ctx.conn, learner_id=ctx.user_id, task_pk=task.pk, action="go_back", reason=data.reason)
    if isinstance(moved, Refused):
        raise ToolFailure(
            ErrorCode.INVALID_STATE,
            f"task {task.id!r} is {moved.current}, not closed; go_back only reopens "
            f"closed tasks. Keep working on it with /submit {task.id}, or "
            "/get_ready for your tasks.",
        )
    assert moved.audit_id is not None  # go_back always changes the status (closed -> in_progress), so it is audited
    return GoBackOutput(
        task_id=task.id,
        project_id=task.project_id,
        old_status=moved.old,
        new_status=moved.new,
        reason=data.reason,
        audit_id=moved.audit_id,
        message=f"Reopened '{task.title}' ({moved.old} -> {moved.new}): {data.reason}. Tasks that depend "
        "on it are blocked again until you close it.",
    )


# request_help ------------------------------------------------------------------------------


class RequestHelpInput(TaskTextInput):
    text_field: ClassVar[str] = "message"
    message: str = Field(min_length=3, max_length=4000, description="What the learner is stuck on.")


class RequestHelpOutput(ToolOutput):
    request_id: int
    task_id: str
    project_id: str
    status: str
    message: str

    def render(self) -> str:
        return self.message


def request_help(data: RequestHelpInput, ctx: ToolContext) -> RequestHelpOutput:
    _, task = resolve(ctx, data.task_id)
    with transaction(ctx.conn):
        existing = open_help_request(ctx.conn, ctx.user_id, task.pk)
        if existing is not None:
            raise ToolFailure(
                ErrorCode.INVALID_STATE,
                f"you already have an open help request (#{existing}) for "
                f"{task.id!r}; wait for an instructor, or add details with "
                f"/add_comment {task.id} <text>.",
            )
        request_id = add_help_request(ctx.conn, learner_id=ctx.user_id, task_pk=task.pk, message=data.message)
    return RequestHelpOutput(
        request_id=request_id,
        task_id=task.id,
        project_id=task.project_id,
        status="open",
        message=f"Help request #{request_id} for '{task.title}' is open; an instructor will answer.",
    )


ADD_COMMENT_TOOL = Tool(
    name="add_comment",
    annotations=ToolHints(
        destructive=False, idempotent=False, open_world=False
    ),  # served over /mcp: adds a comment each time
    description="Add a comment to a task (private to the learner; instructors may share one with every learner).",
    input_model=AddCommentInput,
    output_model=CommentOutput,
    handler=add_comment,
    result_role=RESULT_ROLE,
    needs=frozenset({Need.COURSE}),
    command=CommandBinding(
        name="add_comment",
        usage="/add_comment <task_id> <text> (the text may go on the next lines)",
        example="/add_comment loops range() stops before its end value",
        args_field="task_id",
        body_field="text",
    ),
    error_style="task",
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)

GET_COMMENTS_TOOL = Tool(
    name="get_comments",
    annotations=READ_ONLY_LOCAL,  # served over /mcp
    description="List a task's comments the learner may see: shared ones and the learner's own.",
    input_model=GetCommentsInput,
    output_model=GetCommentsOutput,
    handler=get_comments,
    result_role=RESULT_ROLE,
    needs=frozenset({Need.COURSE}),
    command=CommandBinding(
        name="get_comments", usage="/get_comments <task_id>", example="/get_comments loops", args_field="task_id"
    ),
    error_style="task",
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)

GO_BACK_TOOL = Tool(
    name="go_back",
    annotations=ToolHints(
        destructive=True, idempotent=False, open_world=False
    ),  # served over /mcp: reopens a closed task: its passed state is undone
    description="Reopen a task the learner closed, to redo it; the reason is required and kept in an audit trail.",
    input_model=GoBackInput,
    output_model=GoBackOutput,
    handler=go_back,
    result_role=RESULT_ROLE,
    needs=frozenset({Need.COURSE}),
    command=CommandBinding(
        name="go_back",
        usage="/go_back <task_id> <reason>",
        example="/go_back loops I want to practise while loops again",
        args_field="task_id",
        body_field="reason",
    ),
    error_style="task",
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)

REQUEST_HELP_TOOL = Tool(
    name="request_help",
    annotations=ToolHints(
        destructive=False, idempotent=True, open_world=False
    ),  # served over /mcp: one open request per task
    description="Ask a human instructor for help with a task (one open request per task).",
    input_model=RequestHelpInput,
    output_model=RequestHelpOutput,
    handler=request_help,
    result_role=RESULT_ROLE,
    needs=frozenset({Need.COURSE}),
    command=CommandBinding(
        name="request_help",
        usage="/request_help <task_id> <what you are stuck on>",
        example="/request_help functions my function returns None",
        args_field="task_id",
        body_field="message",
    ),
    error_style="task",
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)
