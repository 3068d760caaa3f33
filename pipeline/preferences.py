"""What one user's settings change in their turns (SPEC 17): read once per turn, applied by
`pipeline/turn.py` to every pass.

- `prompt`: the user's addition to the system prompt (`pipeline/prompt.py` frames it).
- `approval`: commands that ask this user before they run, besides the operator's
  (`pipeline/approval.py` decides).
- `chain`: the chat chain the session's turns use: the entry the session chose first, the rest
  of the configured chain after it as fallbacks. A choice the chain no longer has (the operator
  removed it from `LLM_PROVIDER`/`LLM_MODEL`/`LLM_FALLBACKS`) is ignored: the configured order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from providers import FallbackChain
from storage.connection import DbConnection
from storage.user_settings import UserApproval, get_user_settings, session_model

log = logging.getLogger("pipeline.preferences")


@dataclass(frozen=True)
class Preferences:
    prompt: str
    approval: UserApproval
    chain: FallbackChain


def session_chain(chat: FallbackChain, chosen: str | None) -> FallbackChain:
    """`chat` starting with the session's chosen entry, or `chat` itself."""
    if chosen is None:
        return chat
    chain = chat.starting_with(chosen)
    if chain is None:
        log.info("the session's model %r is no longer in the chain: the configured order is used", chosen)
        return chat
    return chain


def turn_preferences(conn: DbConnection, user_id: int, session_id: str, chat: FallbackChain) -> Preferences:
    settings = get_user_settings(conn, user_id)
    return Preferences(
        prompt=settings.system_prompt,
        approval=settings.approval,
        chain=session_chain(chat, session_model(conn, user_id, session_id)),
    )
