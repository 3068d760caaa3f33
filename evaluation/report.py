"""The report card: one row per model and option, as text for people or JSON for machines.

Each rate says what it counts out of:

- right tool: cases that need a tool whose reply called it;
- well-formed: commands written (any case) that name a command of the list and whose
  arguments the binding and input model accept;
- args match: cases that need a tool whose call was the right one, well formed, with the
  expected arguments (`score.py`);
- false commands: cases that need no tool where the reply was a command (lower is better);
- uses result: answers written after the result (or plain answers, where the case says what
  they must contain) that contain it;
- TTFT: the first pass's time to first token, median; tok/s: tokens per second over every
  pass (`run.py` says how both are measured).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from evaluation.run import CaseRun, Option
from evaluation.score import Verdict, score


@dataclass(frozen=True)
class Tally:
    hits: int
    total: int

    @classmethod
    def of(cls, answers: Sequence[bool | None]) -> Tally:
        counted = [answer for answer in answers if answer is not None]
        return cls(sum(counted), len(counted))

    @property
    def rate(self) -> float | None:
        return self.hits / self.total if self.total else None

    def __str__(self) -> str:
        if not self.total:
            return "n/a"
        return f"{self.hits}/{self.total} {round(100 * self.hits / self.total)}%"


@dataclass(frozen=True)
class Card:
    model: str
    option: Option
    cases: int  # run (not counting those not supported)
    failures: int  # the provider gave no reply (twice)
    right_tool: Tally
    well_formed: Tally
    args_match: Tally
    false_commands: Tally
    answer_uses: Tally
    ttft_ms: float | None
    tokens_per_s: float | None
    right_each: tuple[int, ...] = ()  # right-tool hits of each repeat (`--repeat`): the spread
    false_each: tuple[int, ...] = ()  # false commands of each repeat
    decide_ms: float | None = None  # the decision's reads before a first pass, median (`mass` only)
    first_pass_ms: float | None = None  # the first pass itself, median

    @property
    def repeats(self) -> int:
        return len(self.right_each)

    @property
    def decide_share(self) -> float | None:
        """What the decision adds to a first pass, as a share of the pass's own time."""
        if self.decide_ms is None or not self.first_pass_ms:
            return None
        return self.decide_ms / self.first_pass_ms

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["option"] = {
            "demos": self.option.demos,
            "grammar": self.option.grammar,
            "decide": self.option.decide,
            "native": self.option.native,
            "label": self.option.label,
        }
        data["decide_share"] = self.decide_share
        for name in ("right_tool", "well_formed", "args_match", "false_commands", "answer_uses"):
            tally: Tally = getattr(self, name)
            data[name] = {"hits": tally.hits, "total": tally.total, "rate": tally.rate}
        return data


def median_of(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def card(model: str, option: Option, runs: Sequence[CaseRun]) -> Card:
    verdicts = [score(run) for run in runs]
    repeats = sorted({run.repeat for run in runs})
    each = [[v for run, v in zip(runs, verdicts, strict=True) if run.repeat == r] for r in repeats]
    firsts = [run.passes[0].first_text_ms for run in runs if run.passes and run.passes[0].first_text_ms is not None]
    passes = [stats for run in runs for stats in run.passes if stats.failure is None]
    decode_s = sum(stats.decode_s for stats in passes)
    tokens = sum(stats.tokens for stats in passes)
    return Card(
        model=model,
        option=option,
        cases=len(runs),
        failures=sum(1 for run in runs if run.failure is not None),
        right_tool=Tally.of([v.right_tool for v in verdicts]),
        well_formed=Tally.of([v.well_formed for v in verdicts]),
        args_match=Tally.of([v.args_match for v in verdicts]),
        false_commands=Tally.of([v.false_command for v in verdicts]),
        answer_uses=Tally.of([v.answer_uses for v in verdicts]),
        ttft_ms=statistics.median(firsts) if firsts else None,
        tokens_per_s=tokens / decode_s if decode_s > 0 else None,
        right_each=tuple(Tally.of([v.right_tool for v in mine]).hits for mine in each),
        false_each=tuple(Tally.of([v.false_command for v in mine]).hits for mine in each),
        decide_ms=median_of([run.decide_ms for run in runs]),
        first_pass_ms=median_of([run.first_pass_ms for run in runs]),
    )


def spread(values: tuple[int, ...]) -> str:
    """The repeats' lowest and highest count ("" for one run)."""
    return "" if len(values) < 2 else f" [{min(values)}-{max(values)}]"


COLUMNS = (
    "option",
    "right tool",
    "well-formed",
    "args match",
    "false cmds",
    "uses result",
    "TTFT p50",
    "tok/s",
    "decision / first pass",
)


def table(cards: Sequence[Card]) -> str:
    rows = [COLUMNS]
    for found in cards:
        rows.append(
            (
                found.option.label,
                str(found.right_tool) + spread(found.right_each),
                str(found.well_formed),
                str(found.args_match),
                str(found.false_commands) + spread(found.false_each),
                str(found.answer_uses),
                "n/a" if found.ttft_ms is None else f"{found.ttft_ms:,.0f} ms",
                "n/a" if found.tokens_per_s is None else f"{found.tokens_per_s:.1f}",
                "n/a"
                if found.decide_share is None or found.decide_ms is None
                else f"{found.decide_ms:,.0f} ms ({100 * found.decide_share:.0f}%)",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def text_report(cards: Sequence[Card], runs: Sequence[CaseRun], notes: Sequence[str]) -> str:
    """What `python app.py eval` prints: per model, a header, the table and the notes."""
    lines: list[str] = []
    for model in dict.fromkeys(found.model for found in cards):
        mine = [found for found in cards if found.model == model]
        first = mine[0]
        needing = sum(1 for run in runs if run.option == first.option and run.case.needs_tool)
        lines.append(f"model: {model}")
        cases = first.cases // max(1, first.repeats)
        needing //= max(1, first.repeats)
        repeated = f", run {first.repeats} times: [lowest-highest] of the runs" if first.repeats > 1 else ""
        lines.append(f"cases: {cases} ({needing} need a tool, {cases - needing} need none){repeated}")
        lines.append(table(mine))
        failures = [f"{found.option.label}: {found.failures}" for found in mine if found.failures]
        if failures:
            lines.append("provider failures (no reply twice): " + "; ".join(failures))
    lines += notes
    return "\n".join(lines)


def case_record(run: CaseRun, verdict: Verdict) -> dict[str, Any]:
    call = run.call
    return {
        "id": run.case.id,
        "source": run.case.source,
        "option": run.option.label,
        "reply": run.reply,
        "call": None
        if call is None
        else {"line": call.line, "offered": call.offered, "well_formed": call.well_formed, "args": call.args},
        "answer": run.answer,
        "failure": run.failure,
        "verdict": asdict(verdict),
        "first_text_ms": run.passes[0].first_text_ms if run.passes else None,
        "repeat": run.repeat,
        "decide_ms": run.decide_ms,
    }


def json_report(cards: Sequence[Card], runs: Sequence[CaseRun], notes: Sequence[str]) -> str:
    return json.dumps(
        {
            "cards": [found.to_dict() for found in cards],
            "cases": [case_record(run, score(run)) for run in runs],
            "notes": list(notes),
        },
        ensure_ascii=False,
        indent=2,
    )
