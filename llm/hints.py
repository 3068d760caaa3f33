"""What an operator can do when the model does not answer: one sentence, shared by the
start-up log, `/health` and the chat error, so a newcomer reads the same fix everywhere.

The hint names settings and commands only, never a key, a token or a base URL (a URL can
carry credentials, and the chat error is shown to users).
"""

from __future__ import annotations

from llm.base import FailureKind

#: The way out that needs no model at all (Makefile target `demo`).
DEMO = "run `make demo` (scripted replies, no model needed)"
#: Pointing the server at another model server.
RECONFIGURE = "set LLM_PROVIDER, LLM_BASE_URL and LLM_MODEL to a model server that answers"


def fix_hint(provider: str, model: str, failure: FailureKind | str | None = None) -> str:
    """How to make `provider`/`model` answer, given why it did not (a `FailureKind`, or None)."""
    kind = as_failure(failure)
    if provider == "scripted":
        if kind is FailureKind.SCRIPT_EXHAUSTED:
            return "the scripted replies are used up: restart the server or give SCRIPTED_REPLIES a longer script"
        return f"check the script in SCRIPTED_REPLIES, or {RECONFIGURE}"
    if kind is FailureKind.AUTH or kind is FailureKind.NOT_CONFIGURED:
        first = f"give {provider} a valid API key (LLM_API_KEY)"
    elif kind is FailureKind.RATE_LIMITED:
        first = f"wait for {provider}'s rate limit, or add a fallback (LLM_FALLBACKS)"
    elif provider == "ollama":
        first = f"start Ollama (`ollama serve`) and pull the model (`ollama pull {model}`)"
    else:
        first = f"check that {provider} answers at LLM_BASE_URL and knows the model {model!r} (LLM_MODEL)"
    return f"{first}, or {RECONFIGURE}, or {DEMO}"


def probe_failure(detail: str) -> FailureKind | None:
    """The `FailureKind` behind a `/health` probe's detail ("no API key configured", "HTTP 401 (auth)")."""
    if detail == "no API key configured":
        return FailureKind.NOT_CONFIGURED
    if detail.endswith(")") and "(" in detail:
        return as_failure(detail[detail.rindex("(") + 1 : -1])
    return None


def as_failure(value: FailureKind | str | None) -> FailureKind | None:
    try:
        return FailureKind(value) if value is not None else None
    except ValueError:
        return None
