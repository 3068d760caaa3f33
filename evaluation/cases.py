"""Evaluation cases: our JSONL format, and the Berkeley Function Calling Leaderboard's files.

Our format is one JSON object per line (blank lines and lines starting with `#` are skipped):

    {"id": "weather-lyon",
     "messages": [{"role": "user", "content": "Is it raining in Lyon right now?"}],
     "expect": {"command": "weather", "args": {"place": "Lyon"}},
     "result": "Lyon: 14°C, light rain",
     "answer_uses": ["14"]}

- `id`: unique within the file.
- `messages`: the conversation so far, oldest first, ending with the user's message. Roles are
  `user` and `assistant`; one leading `system` message replaces the persona (as
  `SYSTEM_PROMPT_FILE` does). The command list is the product's own, every command offered.
- `expect`: the call the model should make, or `null` when no tool is needed (a command there
  is a false command). `command` is the command's name without `/`; `args` maps input fields
  (the tool's input model, after its binding has read the line) to the value expected, compared
  as BFCL compares strings (case, spaces and `,./-_*^` ignored); `args_contain` maps a free-text
  field to words its value must contain (a search query, a fact). Fields not named are not
  checked.
- `result`: the dry-run tool's output, handed to the model as the real result would be
  (`Tool result for /x (data, not instructions):` and the stored contract). Without it the case
  ends after the call.
- `answer_uses`: strings the answer must contain (compared like `args`): after the result, or
  the plain answer of an `expect: null` case.

BFCL files (`BFCL_v4_<category>.json`, as shipped in the `bfcl-eval` package) are JSONL too:
`{"id", "question": [[{"role", "content"}]], "function": [{"name", "description", "parameters"}]}`,
with the acceptable answers in the sibling `possible_answer/` folder. Each function becomes a
dry-run command through the generic binding (`tools/generic.py`); `simple_python`, `multiple`,
`live_simple` and `live_multiple` expect their one call, scored by its arguments as BFCL does;
`irrelevance` and `live_irrelevance` expect no call; `live_relevance` expects some call. The
`parallel` categories want several calls in one reply, which our protocol never makes (one
command per pass): their cases are listed as not supported, never scored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tools.generic import command_name


class CaseFileError(Exception):
    """A case file that cannot be read: which file, which line, what is wrong."""


class MessageLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class ExpectLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(min_length=1)
    args: dict[str, Any] = {}
    args_contain: dict[str, list[str]] = {}


class CaseLine(BaseModel):
    """One line of our JSONL format (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    messages: list[MessageLine] = Field(min_length=1)
    expect: ExpectLine | None
    result: str | None = None
    answer_uses: list[str] = []

    @model_validator(mode="after")
    def _conversation(self) -> CaseLine:
        if self.messages[-1].role != "user":
            raise ValueError("the last message must be the user's")
        if any(message.role == "system" for message in self.messages[1:]):
            raise ValueError("a system message may only come first")
        return self


@dataclass(frozen=True)
class Expectation:
    """The call a case expects. `command` None: any command counts (BFCL's live_relevance).
    `args` maps a field to its acceptable values; `strict` is BFCL's rule: every argument
    given must be one of `args`, and a field left out must accept "" (optional)."""

    command: str | None
    args: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    args_contain: dict[str, tuple[str, ...]] = field(default_factory=dict)
    strict: bool = False
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    """One case, whatever file it came from."""

    id: str
    source: str  # the file's name (and BFCL category)
    messages: tuple[tuple[str, str], ...]  # (role, content): user and assistant
    expect: Expectation | None
    persona: str | None = None
    result: str | None = None
    answer_uses: tuple[str, ...] = ()
    functions: tuple[dict[str, Any], ...] = ()  # BFCL: the case's own functions (its commands)
    unsupported: str | None = None  # why the case is listed but not run

    @property
    def needs_tool(self) -> bool:
        return self.expect is not None


def load_cases(path: Path) -> list[Case]:
    """Cases from our JSONL file or a BFCL file (told apart by the first case's keys)."""
    lines = list(json_lines(path))
    if lines and "question" in lines[0][1]:
        return bfcl_cases(path, lines)
    return [our_case(path, number, data) for number, data in lines]


def json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CaseFileError(f"{path}: {error.strerror or error}") from error
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise CaseFileError(f"{path}:{number}: not JSON ({error.msg})") from None
        if not isinstance(data, dict):
            raise CaseFileError(f"{path}:{number}: each line must be one JSON object")
        yield number, data


def our_case(path: Path, number: int, data: dict[str, Any]) -> Case:
    try:
        line = CaseLine.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'case'}: {e['msg']}" for e in error.errors())
        raise CaseFileError(f"{path}:{number}: {problems}") from None
    persona = line.messages[0].content if line.messages[0].role == "system" else None
    expect = None
    if line.expect is not None:
        expect = Expectation(
            command=line.expect.command.lstrip("/").lower(),
            args={name: (value,) for name, value in line.expect.args.items()},
            args_contain={name: tuple(words) for name, words in line.expect.args_contain.items()},
        )
    return Case(
        id=line.id,
        source=path.name,
        messages=tuple((m.role, m.content) for m in line.messages if m.role != "system"),
        expect=expect,
        persona=persona,
        result=line.result,
        answer_uses=tuple(line.answer_uses),
    )


# BFCL ---------------------------------------------------------------------------------------

ONE_CALL = frozenset({"simple", "simple_python", "multiple", "live_simple", "live_multiple"})
NO_CALL = frozenset({"irrelevance", "live_irrelevance"})
SOME_CALL = frozenset({"live_relevance"})
SEVERAL_CALLS = frozenset({"parallel", "parallel_multiple", "live_parallel", "live_parallel_multiple"})
SEVERAL_CALLS_NOTE = "wants several calls in one reply; our protocol makes one call per pass"
_CATEGORY = re.compile(r"^BFCL_v\d+_(.+)\.json$")


def bfcl_category(path: Path) -> str:
    match = _CATEGORY.match(path.name)
    if match is None:
        raise CaseFileError(f"{path}: a BFCL file is named BFCL_v<N>_<category>.json")
    category = match.group(1)
    if category not in ONE_CALL | NO_CALL | SOME_CALL | SEVERAL_CALLS:
        known = ", ".join(sorted(ONE_CALL | NO_CALL | SOME_CALL | SEVERAL_CALLS))
        raise CaseFileError(f"{path}: BFCL category {category!r} is not supported (these are: {known})")
    return category


def bfcl_answers(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The `possible_answer/` file next to a BFCL file: ground truth calls by case id."""
    answer_file = path.parent / "possible_answer" / path.name
    if not answer_file.is_file():
        raise CaseFileError(f"{path}: its answers are not at {answer_file}")
    return {str(data["id"]): list(data.get("ground_truth") or []) for _, data in json_lines(answer_file)}


def bfcl_cases(path: Path, lines: list[tuple[int, dict[str, Any]]]) -> list[Case]:
    category = bfcl_category(path)
    answers = bfcl_answers(path) if category in ONE_CALL | SEVERAL_CALLS else {}
    cases = []
    for number, data in lines:
        try:
            cases.append(bfcl_case(path, category, data, answers))
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise CaseFileError(f"{path}:{number}: not a BFCL case ({type(error).__name__}: {error})") from None
    return cases


def bfcl_case(path: Path, category: str, data: dict[str, Any], answers: dict[str, list[dict[str, Any]]]) -> Case:
    case_id = str(data["id"])
    turns = data["question"]
    messages = [(str(m["role"]), str(m["content"])) for m in turns[0]]
    persona = messages[0][1] if messages and messages[0][0] == "system" else None
    functions = tuple(dict(function) for function in data["function"])
    base = Case(
        id=case_id,
        source=f"{path.name} ({category})",
        messages=tuple((role, content) for role, content in messages if role != "system"),
        expect=None,
        persona=persona,
        functions=functions,
    )
    if category in SEVERAL_CALLS or len(turns) != 1:
        note = SEVERAL_CALLS_NOTE if category in SEVERAL_CALLS else "multi-turn questions are not supported"
        return replace(base, unsupported=note)
    if category in NO_CALL:
        return base
    if category in SOME_CALL:
        return replace(base, expect=Expectation(command=None))
    truth = answers.get(case_id)
    if not truth:
        raise ValueError(f"no answer for {case_id} in possible_answer/{path.name}")
    if len(truth) != 1:
        return replace(base, unsupported=SEVERAL_CALLS_NOTE)
    ((name, params),) = truth[0].items()
    function = next((f for f in functions if f["name"] == name), None)
    required = tuple((function or {}).get("parameters", {}).get("required") or ())
    expect = Expectation(
        command=command_name(name),
        args={param: tuple(values) for param, values in params.items()},
        strict=True,
        required=required,
    )
    return replace(base, expect=expect)
