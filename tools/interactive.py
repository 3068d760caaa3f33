"""Interactive UI tools (SPEC section 8): `/ask_choice`, `/ask_text`, `/confirm`.

Running one of these commands does not answer it: the handler only validates and builds the
widget, the pipeline stores it as a pending `ui_tools` message with a `toolCallId`, and the
turn ends. The user's answer arrives at `POST /api/ai/tool-result`; `apply_answer` checks
it against the widget, writes it to the user's profile with provenance, and the loop goes
on with the next model pass.

Command forms (the first word after the command is the profile field):
    /ask_choice <field> <question>      options on the following lines, one per line
    /ask_text <field> <question>
    /confirm <field> <question>         the user confirms (or not) the field's current value
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, field_validator

from storage.connection import DbConnection
from storage.profile import FIELD_NAME_PATTERN, FieldNotFound, ProfileError, confirm_field, set_field
from storage.roles import UI_TOOLS
from tools.base import CommandBinding, ErrorCode, Need, Tool, ToolContext, ToolFailure, ToolInput, ToolOutput

Widget = Literal["choice", "text", "confirm", "approval"]
InputMethod = Literal["selection", "text", "voice"]
MAX_ANSWER_CHARS = 2000
YES = {"yes", "y", "true", "confirm", "confirmed"}
NO = {"no", "n", "false", "change", "make changes"}
APPROVE = YES | {"approve", "approved", "run", "allow", "ok"}  # an approval's yes (SPEC 8, Approval)
DENY = NO | {"deny", "denied", "decline", "declined", "don't run", "do not run", "cancel"}
APPROVAL_FIELD = "approval"  # an approval's `targetField`: it writes no profile field
APPROVAL_OPTIONS = ["Run", "Don't run"]


OptionText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class _Ask(ToolInput):
    target_field: str = Field(pattern=FIELD_NAME_PATTERN, description="Profile field that receives the answer.")
    question: str = Field(min_length=3, max_length=500)


class AskChoiceInput(_Ask):
    options: list[OptionText] = Field(min_length=2, max_length=10)

    @field_validator("options")
    @classmethod
    def distinct_options(cls, options: list[str]) -> list[str]:
        if len({option.lower() for option in options}) != len(options):
            raise ValueError("options must be different")
        return options


class AskTextInput(_Ask):
    pass


class ConfirmInput(_Ask):
    pass


class WidgetOutput(ToolOutput):
    """The widget the web UI renders; stored in the pending message's meta."""

    widget: Widget
    target_field: str
    question: str
    options: list[str] = Field(default_factory=list)

    def render(self) -> str:
        if self.widget == "approval":
            return "Asked the user to approve this command.\n(waiting for the answer; nothing ran yet)"
        lines = [f"Asked the user: {self.question}"]
        if self.options:
            lines.append("Options: " + " | ".join(self.options))
        lines.append(f"(waiting for the answer; it will be saved to the profile field {self.target_field})")
        return "\n".join(lines)


def split_field_and_question(args: str) -> dict[str, Any]:
    field, _, question = args.strip().partition(" ")
    return {"target_field": field, "question": question.strip()}


def parse_choice(args: str, body: str) -> dict[str, Any]:
    options = [line.strip().lstrip("-*•").strip() for line in body.splitlines() if line.strip()]
    return {**split_field_and_question(args), "options": options}


def parse_single(args: str, body: str) -> dict[str, Any]:
    return split_field_and_question(args)


def ask_choice(data: AskChoiceInput, ctx: ToolContext) -> WidgetOutput:
    return WidgetOutput(widget="choice", target_field=data.target_field, question=data.question, options=data.options)


def ask_text(data: AskTextInput, ctx: ToolContext) -> WidgetOutput:
    return WidgetOutput(widget="text", target_field=data.target_field, question=data.question)


def confirm(data: ConfirmInput, ctx: ToolContext) -> WidgetOutput:
    return WidgetOutput(
        widget="confirm", target_field=data.target_field, question=data.question, options=["Confirm", "Make changes"]
    )


class UiAnswerOutput(ToolOutput):
    """The stored result of an answered widget."""

    widget: Widget
    target_field: str
    value: str | bool  # checked by `check_answer`: an option, text of at most MAX_ANSWER_CHARS, or yes/no
    input_method: InputMethod
    confirmed: bool | None = None

    def render(self) -> str:
        if self.widget == "confirm":
            if self.confirmed:
                return f"The user confirmed the profile field {self.target_field}."
            return f"The user did not confirm {self.target_field}; ask what should change."
        return f"The user answered: {self.value}\n(saved to the profile field {self.target_field})"


def check_answer(widget: WidgetOutput, value: Any) -> Any:
    """The answer normalised for its widget, or INVALID_TOOL_RESULT saying what fits."""
    kind = widget.widget
    if kind == "choice":
        options = widget.options
        match = next(
            (option for option in options if isinstance(value, str) and option.lower() == value.strip().lower()), None
        )
        if match is None:
            raise ToolFailure(ErrorCode.INVALID_TOOL_RESULT, f"value must be one of: {', '.join(options)}")
        return match
    if kind == "text":
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_ANSWER_CHARS:
            raise ToolFailure(ErrorCode.INVALID_TOOL_RESULT, f"value must be text of 1-{MAX_ANSWER_CHARS} characters")
        return value.strip()
    if isinstance(value, bool):
        return value
    yes, no = (APPROVE, DENY) if kind == "approval" else (YES, NO)
    if isinstance(value, str) and value.strip().lower() in yes | no:
        return value.strip().lower() in yes
    what = "an approval (true runs the command)" if kind == "approval" else "a confirmation"
    raise ToolFailure(ErrorCode.INVALID_TOOL_RESULT, f"value must be true/false (or yes/no) for {what}")


def approval_widget(command_line: str) -> WidgetOutput:
    """The question an approval asks (`pipeline/approval.py` decides when): the command shown
    whole beside it (the stored call's `command_line`, `args`, `body`)."""
    return WidgetOutput(
        widget="approval",
        target_field=APPROVAL_FIELD,
        question=f"Allow the assistant to run {command_line[:200]}?",
        options=APPROVAL_OPTIONS,
    )


def apply_answer(
    conn: DbConnection, user_id: int, widget: WidgetOutput, value: Any, input_method: InputMethod
) -> UiAnswerOutput:
    """Write a checked answer to the profile (provenance: the user, how, when)."""
    field = widget.target_field
    try:
        if widget.widget == "confirm":
            confirm_field(conn, user_id, field, confirmed=bool(value))
            return UiAnswerOutput(
                widget="confirm", target_field=field, value=value, input_method=input_method, confirmed=bool(value)
            )
        set_field(conn, user_id, field, value, source="user_input", input_method=input_method)
    except FieldNotFound as error:
        raise ToolFailure(
            ErrorCode.PROFILE_UPDATE_FAILED,
            f"there is no profile field {field} to confirm yet; ask for its value first",
        ) from error
    except ProfileError as error:
        raise ToolFailure(ErrorCode.PROFILE_UPDATE_FAILED, f"the profile could not be updated: {error}") from error
    return UiAnswerOutput(widget=widget.widget, target_field=field, value=value, input_method=input_method)


def _tool(
    name: str, description: str, model: type[_Ask], handler: Any, usage: str, example: str, parse: Any
) -> Tool[Any, Any]:
    return Tool(
        name=name,
        description=description,
        input_model=model,
        output_model=WidgetOutput,
        handler=handler,
        result_role=UI_TOOLS,
        needs=frozenset({Need.COURSE}),
        interactive=True,
        command=CommandBinding(name=name, usage=usage, example=example, parse=parse),
        budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
    )


ASK_CHOICE_TOOL = _tool(
    "ask_choice",
    "Show the user a multiple-choice question; the answer is saved to their profile.",
    AskChoiceInput,
    ask_choice,
    "/ask_choice <profile_field> <question> then one option per line",
    "/ask_choice experience What is your programming experience?\n- none\n- some\n- a lot",
    parse_choice,
)
ASK_TEXT_TOOL = _tool(
    "ask_text",
    "Ask the user for a short free-text answer; it is saved to their profile.",
    AskTextInput,
    ask_text,
    "/ask_text <profile_field> <question>",
    "/ask_text goal What would you like to build?",
    parse_single,
)
CONFIRM_TOOL = _tool(
    "confirm",
    "Ask the user to confirm a value already in their profile.",
    ConfirmInput,
    confirm,
    "/confirm <profile_field> <question>",
    "/confirm location Is Paris still your location?",
    parse_single,
)
INTERACTIVE_TOOLS = (ASK_CHOICE_TOOL, ASK_TEXT_TOOL, CONFIRM_TOOL)
