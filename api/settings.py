"""`GET/PATCH /api/settings` (a user's own settings, SPEC 17) and `GET /api/models` (the configured
chain a session may start with; `PATCH /sessions/<id> {"model"}` chooses).

Approval (SPEC 8): the operator's `TOOL_APPROVAL` decides what asks; a user may only add
commands that ask (`approval.commands`) or make every command ask (`approval.every_command`).
The body has no way to say "never ask": a command the operator makes ask is listed with
`locked: true` and asks whatever the user's list says (naming it or leaving it out changes
nothing). A name that is no command of this deployment answers 400 `unknown_command`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from api.auth import current_user, require_user
from api.bodies import json_body
from api.database import get_db
from api.declare import Reply, operation
from api.errors import ApiError
from api.services import services
from pipeline.approval import Standing, standing_rule, user_asks
from providers import entry_id
from storage.user_settings import (
    MAX_APPROVAL_COMMANDS,
    MAX_PROMPT_CHARS,
    Theme,
    UserApproval,
    UserSettings,
    get_user_settings,
    save_user_settings,
)

bp = Blueprint("settings", __name__, url_prefix="/api")
bp.before_request(require_user)

CommandName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
OPERATOR_REASON = {
    "always": "the operator makes this command ask (TOOL_APPROVAL)",
    "sometimes": "the operator makes it ask for an UPDATE statement (TOOL_APPROVAL)",
}


class ApprovalBody(BaseModel):
    """The user's whole addition to the operator's approval policy (it replaces the stored one)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # `0` is not `false`
    every_command: bool = False
    commands: list[CommandName] = Field(default_factory=list, max_length=MAX_APPROVAL_COMMANDS)


class SettingsPatch(BaseModel):
    """The settings to change; those not named are kept."""

    model_config = ConfigDict(extra="forbid", strict=True)
    theme: Theme | None = None
    system_prompt: str | None = Field(default=None, max_length=MAX_PROMPT_CHARS)
    approval: ApprovalBody | None = None


class CommandApproval(BaseModel):
    """One command of the catalog: whether it asks before it runs, and who decides."""

    command: str
    description: str
    operator: Standing = Field(description="what TOOL_APPROVAL does: `always` asks, `sometimes`, `never`")
    user: bool = Field(description="the user's own settings make it ask")
    asks: Standing = Field(description="what a call does now: the operator's rule or the user's, the stricter")
    locked: bool = Field(description="the operator makes it ask: the user cannot turn it off")
    reason: str | None = None


class SettingsOut(BaseModel):
    theme: Theme
    system_prompt: str
    system_prompt_max: int = MAX_PROMPT_CHARS
    approval: UserApproval
    commands: list[CommandApproval] = Field(description="every command of the catalog (the widgets never ask)")


class ModelEntry(BaseModel):
    id: str = Field(description='`provider:model`; `PATCH /sessions/<id> {"model": id}` chooses it')
    label: str
    provider: str
    model: str
    default: bool = Field(description="the chain's first entry: what a session without a choice starts with")
    health: Literal["ok", "down", "unknown"] = Field(
        description="from the last `/health` probe and the entry's circuit; `unknown` before any probe"
    )


class ModelList(BaseModel):
    models: list[ModelEntry]


def settings_out(settings: UserSettings) -> SettingsOut:
    policy = services().settings.tool_approval
    rows = []
    for tool in services().turns.registry.commands():
        if tool.interactive or tool.command is None:
            continue  # a widget is a question already (SPEC 8)
        operator = standing_rule(tool, policy)
        mine = user_asks(tool, settings.approval)
        rows.append(
            CommandApproval(
                command=tool.command.name,
                description=tool.description,
                operator=operator,
                user=mine,
                asks="always" if mine else operator,
                locked=operator == "always",
                reason=OPERATOR_REASON.get(operator),
            )
        )
    return SettingsOut(
        theme=settings.theme,
        system_prompt=settings.system_prompt,
        approval=settings.approval,
        commands=sorted(rows, key=lambda row: row.command),
    )


def known_commands() -> set[str]:
    return {
        tool.command.name
        for tool in services().turns.registry.commands()
        if tool.command is not None and not tool.interactive
    }


@bp.get("/settings")
@operation("The user's settings, with what each command's approval is", replies={200: Reply("settings", SettingsOut)})
def show() -> ResponseReturnValue:
    settings = get_user_settings(get_db(), current_user().id)
    return jsonify(settings_out(settings).model_dump(mode="json"))


@bp.patch("/settings")
@operation(
    "Change the user's settings",
    body=SettingsPatch,
    replies={
        200: Reply("the settings after the change", SettingsOut),
        400: Reply("a bad field, or `unknown_command` in `approval.commands`"),
    },
)
def update() -> ResponseReturnValue:
    patch = json_body(SettingsPatch, hint=': {"theme"?, "system_prompt"?, "approval"?}')
    conn, user_id = get_db(), current_user().id
    current = get_user_settings(conn, user_id)
    changes: dict[str, object] = {}
    if patch.theme is not None:
        changes["theme"] = patch.theme
    if patch.system_prompt is not None:
        changes["system_prompt"] = patch.system_prompt.strip()
    if patch.approval is not None:
        unknown = sorted(set(patch.approval.commands) - known_commands())
        if unknown:
            raise ApiError(400, "unknown_command", f"no such command here: {', '.join(unknown)}", unknown)
        changes["approval"] = UserApproval(
            every_command=patch.approval.every_command, commands=tuple(sorted(set(patch.approval.commands)))
        )
    saved = save_user_settings(conn, user_id, current.model_copy(update=changes)) if changes else current
    return jsonify(settings_out(saved).model_dump(mode="json"))


def model_entries() -> list[ModelEntry]:
    chain = services().turns.chat
    probed = services().provider_probe.known()
    circuits = chain.breaker_states()
    entries = []
    for index, provider in enumerate(chain.providers):
        health: Literal["ok", "down", "unknown"] = "unknown"
        if probed is not None and index < len(probed):
            health = "ok" if probed[index].ok else "down"
        if circuits is not None and circuits[index].state == "open":
            health = "down"
        entries.append(
            ModelEntry(
                id=entry_id(provider),
                label=f"{provider.model} ({provider.name})",
                provider=provider.name,
                model=provider.model,
                default=index == 0,
                health=health,
            )
        )
    return entries


@bp.get("/models")
@operation(
    "The configured model chain (LLM_PROVIDER/LLM_MODEL, then LLM_FALLBACKS): what a session may start with",
    replies={200: Reply("the chain, in order", ModelList)},
)
def models() -> ResponseReturnValue:
    return jsonify(ModelList(models=model_entries()).model_dump(mode="json"))


def check_model(model: str | None) -> str | None:
    """A model id a session may choose (None: the configured order), else 400 `unknown_model`."""
    if model is not None and model not in services().turns.chat.entry_ids():
        raise ApiError(400, "unknown_model", f"{model!r} is not in the configured chain (GET /api/models)")
    return model
