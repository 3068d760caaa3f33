"""Run one case as the product runs a turn, with its tools in dry-run.

Context (the real system prompt of the case's command list, demonstrations when the option
says so, the case's conversation as stored messages) -> a provider pass read through the
product's reply gate (a command that takes no body stops the stream after its first line,
as in a chat turn) -> the one detector -> the router, whose dry-run tool returns the case's
canned result (whichever command of the list the model called: a dry run has no other) -> a
second pass that sees that result exactly as production sends it (the stored contract, framed
as data) and whose answer is what the user would read.

The case ends after the first pass when the reply is text, when the command was refused
(unknown, or arguments its binding or input model reject: what the eval measures is the
call, not the recovery), when the case gives no result, and where a turn would end: a
terminal tool (`/imagine`) or a widget waiting for the user.

Timing: `first_text_ms` is the provider's, from the call's start to the first piece of text;
tokens per second are the server's completion tokens (or, when it reports none, the streamed
pieces: llama.cpp, Ollama and vLLM stream one token a piece) after the first, over the time
from the first piece to the last.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from pydantic import ValidationError

from commands.detect import Command, detect_command
from commands.router import Routed, command_input, route
from config.settings import Settings
from evaluation.cases import Case
from evaluation.dryrun import dry_context, dry_run_registry, function_registry
from foundation.cancellation import NEVER
from pipeline.catalog import EVERYTHING, offered
from pipeline.context import build_context
from pipeline.decide import decide_by_mass
from pipeline.demos import demonstrations
from pipeline.passes import ATTEMPTS
from pipeline.prompt import DEFAULT_PERSONA, PromptBook
from pipeline.reply_cap import CappedSink
from pipeline.reply_gate import ReplyGate
from pipeline.turn import TOOL_LIMIT_REACHED, strip_commands, takes_body
from providers import ChatMessage, FallbackChain, Provider
from storage.messages import Message
from tools.base import BindingError, ToolContext
from tools.contract import command_text, stored_result
from tools.generic import SchemaInput
from tools.registry import ToolRegistry

SESSION = "eval"
DECIDE_THRESHOLD = 0.5  # `LLM_DECIDE_THRESHOLD`'s default: the card measures the product's defaults
PROMPT_COMMANDS = Settings.model_fields["prompt_commands"].default  # a case with more commands: a cut list


def accepts_grammar(provider: Provider) -> bool:
    """Whether the provider sends a decoding grammar (SPEC 7a.1); others never get one."""
    return provider.accepts_grammar


@dataclass(frozen=True)
class Option:
    """One way of running the cases: demonstrations on the first pass, the first-line grammar,
    how the first pass decides (`LLM_DECIDE`: `greedy`, or `mass` with `shortlist` candidates),
    or the provider's native function calling instead of our text protocol (`native`)."""

    demos: bool
    grammar: bool
    decide: Literal["greedy", "mass"] = "greedy"
    shortlist: int = 3
    native: bool = False
    prompt_commands: int = PROMPT_COMMANDS  # more offered commands than this: a cut list (`PROMPT_COMMANDS`)

    @property
    def label(self) -> str:
        if self.native:
            return "native function calling (tools field)"
        grammar = "on" if self.grammar else "off"
        decided = "by mass" if self.decide == "mass" else "greedy"
        listed = "" if self.prompt_commands == PROMPT_COMMANDS else f", lists at most {self.prompt_commands}"
        return f"text: demos {'on' if self.demos else 'off'}, grammar {grammar}, {decided}{listed}"


@dataclass(frozen=True)
class PassStats:
    first_text_ms: float | None
    tokens: int  # generated tokens (or streamed pieces) after the first
    decode_s: float  # from the first piece to the last
    failure: str | None = None


@dataclass(frozen=True)
class Call:
    """The command a reply's first line made, as the router read it."""

    name: str
    line: str
    offered: bool  # names a command of the case's list
    args: dict[str, Any] | None  # the validated input; None when refused
    problem: str = ""  # why it was refused (the router's message)

    @property
    def well_formed(self) -> bool:
        return self.offered and self.args is not None


@dataclass(frozen=True)
class CaseRun:
    case: Case
    option: Option
    reply: str | None = None  # the first pass's reply
    call: Call | None = None
    answer: str | None = None  # what the user would read (None: the case ended at the call)
    passes: tuple[PassStats, ...] = ()
    failure: str | None = None  # the provider failed twice, or the case could not be set up
    repeat: int = 0  # which run of the case set (`--repeat`)
    decide_ms: float | None = None  # the reads of the decision by mass, before the first pass
    first_pass_ms: float | None = None  # the first pass itself, from its call to its last piece


class Timing(TypedDict):
    decide_ms: float | None
    first_pass_ms: float | None


class MeteredSink:
    """A `providers.StreamSink` in front of the product's own (`CappedSink`), timing pieces."""

    def __init__(self, inner: CappedSink) -> None:
        self.inner = inner
        self.pieces = 0
        self.first = self.last = 0.0

    def begin(self, provider: str, model: str) -> None:
        self.pieces, self.first, self.last = 0, 0.0, 0.0
        self.inner.begin(provider, model)

    def feed(self, piece: str) -> bool:
        if piece:
            now = time.perf_counter()
            self.first = self.first or now
            self.last = now
            self.pieces += 1
        return self.inner.feed(piece)


def one_pass(
    chain: FallbackChain,
    context: Sequence[ChatMessage],
    registry: ToolRegistry,
    *,
    grammar: str | None,
    last_pass: bool,
) -> tuple[str | None, PassStats]:
    """A provider pass as `pipeline.passes.provider_pass` makes it (the gate, the caps, the one
    retry of 6.4), timed."""
    noop = lambda *_: None  # noqa: E731 -- nothing is shown during an eval
    stats = PassStats(None, 0, 0.0, "no attempt")
    for _ in range(ATTEMPTS):
        gate = ReplyGate(publish=noop, reset=noop, takes_body=takes_body(registry), read_all=last_pass)
        sink = MeteredSink(CappedSink(gate))
        completion = chain.stream(context, sink, cancel=NEVER, grammar=grammar)
        reported = (completion.usage or {}).get("completion_tokens")
        tokens = max(0, (reported if reported and not completion.stopped_early else sink.pieces) - 1)
        failure = completion.failure.value if completion.failure is not None else None
        stats = PassStats(completion.first_text_ms, tokens, max(0.0, sink.last - sink.first), failure)
        text = sink.inner.text if completion.text is not None else None
        if text is not None and text.strip():
            gate.finish()
            return text, stats
    return None, stats


def stored(case: Case) -> list[Message]:
    return [
        Message(id=index, session_id=SESSION, role=role, content=content, created_at="")
        for index, (role, content) in enumerate(case.messages, start=1)
    ]


def no_images(message: Message) -> tuple[str, ...]:
    return ()


def case_registry(case: Case, tools: ToolRegistry) -> ToolRegistry:
    """The case's commands in dry-run: its BFCL functions, or the product's tools."""
    if case.functions:
        return function_registry(case.functions, case.result)
    return dry_run_registry(tools, case.result)


def read_call(command: Command, registry: ToolRegistry, ctx: ToolContext) -> tuple[Call, Routed]:
    """Route the command in dry-run; the call as read, and what the router answered."""
    routed = route(command, registry, ctx)
    tool = registry.for_command(command.name)
    if tool is None or tool.command is None or not routed.result.ok:
        problem = routed.result.message or str(routed.result.error_code)
        return Call(command.name, command.line, tool is not None, None, problem), routed
    try:
        data = tool.input_model.model_validate(command_input(tool.command, command))
    except (BindingError, ValidationError) as error:  # the router accepted it: never happens
        return Call(command.name, command.line, True, None, str(error)), routed
    args = data.arguments() if isinstance(data, SchemaInput) else data.model_dump(mode="json")
    return Call(command.name, command.line, True, args), routed


def run_case(case: Case, chain: FallbackChain, option: Option, tools: ToolRegistry) -> CaseRun:
    """One case under one option (never raises for a model's or a server's failure)."""
    try:
        registry = case_registry(case, tools)
    except Exception as error:  # a BFCL function that cannot be a command (two with one name...)
        return CaseRun(case, option, failure=f"the case's functions cannot be commands: {error}")
    catalog = offered(registry, EVERYTHING)
    book = PromptBook(registry, case.persona or DEFAULT_PERSONA)
    history = stored(case)
    asked = next((content for role, content in reversed(case.messages) if role == "user"), "")
    listing = book.listing(EVERYTHING, asked, option.prompt_commands)
    context = build_context(
        book.system_prompt(EVERYTHING, demos=option.demos, cut=listing.cut),
        history,
        followup_turns=0,
        load_images=no_images,
        demos=demonstrations(catalog) if option.demos else (),
        listing=listing.message,
    )
    grammar = book.grammar(EVERYTHING, listing) if option.grammar else None
    decide_ms = None
    if option.decide == "mass":
        started = time.perf_counter()
        decision = decide_by_mass(
            chain.primary,
            context,
            listing.tools,
            candidates=book.candidates(EVERYTHING, listing, asked, option.shortlist),
            threshold=DECIDE_THRESHOLD,
            cancel=NEVER,
        )
        decide_ms = (time.perf_counter() - started) * 1000
        if decision is not None and decision.grammar is not None:
            grammar = decision.grammar
    started = time.perf_counter()
    reply, first = one_pass(chain, context, registry, grammar=grammar, last_pass=False)
    timed = Timing(decide_ms=decide_ms, first_pass_ms=(time.perf_counter() - started) * 1000)
    if reply is None:
        return CaseRun(case, option, passes=(first,), failure=f"provider: {first.failure}", **timed)
    command = detect_command(reply)
    if command is None:
        return CaseRun(case, option, reply=reply, answer=reply, passes=(first,), **timed)
    call, routed = read_call(command, registry, dry_context())
    tool = registry.for_command(command.name)
    if not call.well_formed or case.result is None or tool is None or tool.terminal_on_success or tool.interactive:
        return CaseRun(case, option, reply=reply, call=call, passes=(first,), **timed)
    result = stored_result(
        routed.role, command.name, command.line, routed.result, **command_text(command.args, command.body)
    )
    history.append(Message(len(history) + 1, SESSION, routed.role, result.content, "", result.meta))
    context = build_context(
        book.system_prompt(EVERYTHING, cut=listing.cut),
        history,
        followup_turns=0,
        load_images=no_images,
        listing=listing.message,
    )
    text, second = one_pass(chain, context, registry, grammar=None, last_pass=True)
    if text is None:
        return CaseRun(
            case, option, reply, call, passes=(first, second), failure=f"provider: {second.failure}", **timed
        )
    answer = text if detect_command(text) is None else (strip_commands(text) or TOOL_LIMIT_REACHED)
    return CaseRun(case, option, reply, call, answer, (first, second), **timed)
