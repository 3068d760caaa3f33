"""The nine learner task tools of SPEC section 10 (role `task_tools`, error style `task`).

`common.py` holds task references, the chat argument rule and shared views;
`navigation.py` get_ready / show_task / get_context; `progress.py` start_task / submit;
`feedback.py` add_comment / get_comments / go_back / request_help. All are scoped to
`ctx.user_id`, the learner. Registered in `tools/catalog.py`.
"""

from __future__ import annotations

from typing import Any

from tools.base import Tool
from tools.learner.feedback import ADD_COMMENT_TOOL, GET_COMMENTS_TOOL, GO_BACK_TOOL, REQUEST_HELP_TOOL
from tools.learner.navigation import GET_CONTEXT_TOOL, GET_READY_TOOL, SHOW_TASK_TOOL
from tools.learner.progress import START_TASK_TOOL, SUBMIT_TOOL

TASK_TOOLS: tuple[Tool[Any, Any], ...] = (
    GET_READY_TOOL,
    SHOW_TASK_TOOL,
    GET_CONTEXT_TOOL,
    START_TASK_TOOL,
    SUBMIT_TOOL,
    ADD_COMMENT_TOOL,
    GET_COMMENTS_TOOL,
    GO_BACK_TOOL,
    REQUEST_HELP_TOOL,
)

__all__ = ["TASK_TOOLS"]
