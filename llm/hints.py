"""What happened when the model did not answer: in a user's words, and in an operator's.

A user reads one of four plain sentences (`user_words`): the model is not answering, is
overloaded, refused the request, or cannot be reached; with a `reason` code clients can branch
on. An operator reads what failed (`what_failed`: which timer, which HTTP status) and what to
do about it (`fix_hint`, shared by the start-up log, the log line of a failed turn, `/health`
and the admin page). Settings names, `make demo`, addresses and exception text are operator
words: they never reach the chat or a user's API error.

The hint names settings and commands only, never a key, a token or a base URL (a URL can
carry credentials).
"""

from __future__ import annotations

from typing import Literal

from llm.base import FailureKind

Reason = Literal["not_answering", "overloaded", "refused", "unreachable"]

#: What a user reads, by reason: what happened, in their words, and that nothing is lost.
USER_WORDS: dict[Reason, str] = {
    "not_answering": "The model is not answering right now. Your message was kept; try again in a moment.",
    "overloaded": "The model is overloaded or failing right now. Your message was kept; try again in a moment.",
    "refused": (
        "The model refused the request. Your message was kept; if this happens again, "
        "tell the person who runs this server."
    ),
    "unreachable": "The model cannot be reached right now. Your message was kept; try again in a moment.",
}

_REASONS: dict[FailureKind, Reason] = {
    FailureKind.SERVER_ERROR: "overloaded",
    FailureKind.RATE_LIMITED: "overloaded",
    FailureKind.UPSTREAM_ERROR: "overloaded",
    FailureKind.CLIENT_ERROR: "refused",
    FailureKind.AUTH: "refused",
    FailureKind.NOT_CONFIGURED: "refused",
}


def reason_of(
    failure: FailureKind | None, *, status_code: int | None = None, cause: FailureKind | None = None
) -> Reason:
    """Which of the four things happened. A refused or failed connection with no HTTP answer
    is `unreachable` (a cut in the middle of an answer is `not_answering`); a provider skipped
    because its circuit is open says what opened it (`cause`)."""
    if failure is FailureKind.CIRCUIT_OPEN:
        return reason_of(cause) if cause is not None and cause is not FailureKind.CIRCUIT_OPEN else "not_answering"
    if failure is FailureKind.CONNECTION:
        return "unreachable" if status_code is None else "not_answering"
    return _REASONS.get(failure, "not_answering") if failure is not None else "not_answering"


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
    elif kind is FailureKind.TIMEOUT:
        first = (
            "raise LLM_TIMEOUT_S (a cold CPU model may need minutes to load and read a long prompt) "
            "or use a faster model"
        )
    elif kind is FailureKind.IDLE_TIMEOUT:
        first = f"check the log of {provider}'s server (it stopped sending mid-answer), or raise LLM_IDLE_TIMEOUT_S"
    elif kind is FailureKind.CLIENT_ERROR:
        first = (
            f"check that {provider} answers at LLM_BASE_URL and knows the model {model!r} (LLM_MODEL), and that "
            "LLM_MAX_TOKENS and the conversation fit the model's limits (the server's log says what it refused)"
        )
    elif kind is FailureKind.RATE_LIMITED:
        first = f"wait for {provider}'s rate limit, or add a fallback (LLM_FALLBACKS)"
    elif provider == "ollama":
        first = f"start Ollama (`ollama serve`) and pull the model (`ollama pull {model}`)"
    else:
        first = f"check that {provider} answers at LLM_BASE_URL and knows the model {model!r} (LLM_MODEL)"
    return f"{first}, or {RECONFIGURE}, or {DEMO}"


def what_failed(
    failure: FailureKind | None,
    *,
    status_code: int | None = None,
    timeout_s: float,
    idle_timeout_s: float,
) -> str:
    """What the user is told happened, naming the timer or the HTTP status behind it."""
    status = f" (HTTP {status_code})" if status_code is not None else ""
    if failure is FailureKind.TIMEOUT:
        return f"the model did not start answering within {timeout_s:g} s (LLM_TIMEOUT_S)"
    if failure is FailureKind.IDLE_TIMEOUT:
        return f"the model started answering, then sent nothing for {idle_timeout_s:g} s (LLM_IDLE_TIMEOUT_S)"
    if failure is FailureKind.CLIENT_ERROR:
        return f"the provider refused our request{status}"
    if failure is FailureKind.AUTH:
        return f"the provider refused our API key{status}"
    if failure is FailureKind.RATE_LIMITED:
        return f"the provider is rate limiting us{status}"
    if failure is FailureKind.SERVER_ERROR:
        return f"the model server failed{status}"
    if failure is FailureKind.MALFORMED:
        return "the model server sent a reply that could not be read"
    if failure is FailureKind.UPSTREAM_ERROR:
        return "the provider reported an error of the model behind it"
    if failure is FailureKind.EMPTY:
        return "the model answered with nothing"
    if failure is FailureKind.CIRCUIT_OPEN:
        return "the provider kept failing, so it is not called for a while (PROVIDER_BREAKER_COOLDOWN_S)"
    return "the model provider did not answer"  # a refused or cut connection, or anything else


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
