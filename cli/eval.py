"""`python app.py eval CASES…`: the protocol evaluation of SPEC 15 (`evaluation/`).

    python app.py eval examples/eval/cases.jsonl
    python app.py eval cases.jsonl --provider openai --base-url http://127.0.0.1:8080/v1 --model m
    python app.py eval BFCL_v4_simple_python.json --limit 30 --compare --json

    python app.py eval examples/eval/cases.jsonl --native --repeat 3

The provider is the configured one (`LLM_PROVIDER`, `LLM_MODEL`, `LLM_BASE_URL`, its key),
unless `--provider`, `--model` or `--base-url` say otherwise; fallbacks are never used (the
card is one model's). Sampling is pinned so that a card can be made again: `temperature` 0 and
a seed, unless `--temperature` / `--seed` say otherwise. Without `--compare` the cases run
with `PROMPT_DEMOS` and `LLM_GRAMMAR` as configured, once deciding greedily and once by
probability mass (`LLM_DECIDE`, where the provider gives log-probabilities); with it, with
demonstrations on and off, each with the grammar on and off where the provider accepts one.
`--native` adds the same cases through the provider's own function calling (`tools`), so the
card shows our text protocol and native calling side by side; `--repeat N` runs everything N
times and shows each rate's spread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import click
from pydantic import ValidationError

from config.settings import Settings
from evaluation.cases import Case, CaseFileError, load_cases
from evaluation.native import run_native
from evaluation.report import card, json_report, text_report
from evaluation.run import CaseRun, Option, accepts_grammar, run_case
from providers import FallbackChain, ProviderError, build_provider, llm_config
from tools.catalog import build_registry


def options(settings: Settings, *, compare: bool, grammar: bool, odds: bool, native: bool) -> list[Option]:
    """The ways the cases run: greedy (and by mass where the provider may give log-probabilities,
    with the configured short list), the `--compare` grid, native calling last."""
    k, listed = settings.command_shortlist, settings.prompt_commands
    if compare:
        chosen = [
            Option(demos, with_grammar, prompt_commands=listed)
            for demos in (True, False)
            for with_grammar in (False, True)[: 1 + grammar]
        ]
    else:
        with_grammar = grammar and settings.llm_grammar == "first_line"
        chosen = [Option(demos=bool(settings.prompt_demos), grammar=with_grammar, prompt_commands=listed)]
    if odds:
        chosen += [Option(option.demos, option.grammar, "mass", k, prompt_commands=listed) for option in chosen]
    if native:
        chosen.append(Option(demos=False, grammar=False, native=True))
    return chosen


def read_cases(paths: tuple[Path, ...], limit: int | None) -> tuple[list[Case], list[str]]:
    """The cases to run (at most `limit` of each file) and a note on those not supported."""
    runnable: list[Case] = []
    skipped: dict[str, list[str]] = {}
    for path in paths:
        try:
            found = load_cases(path)
        except CaseFileError as error:
            raise click.ClickException(str(error)) from error
        for case in found:
            if case.unsupported is not None:
                skipped.setdefault(f"{case.source}: {case.unsupported}", []).append(case.id)
        runnable += [case for case in found if case.unsupported is None][:limit]
    notes = [f"not supported, not scored: {len(ids)} case(s) of {reason}" for reason, ids in skipped.items()]
    return runnable, notes


def register(cli: click.Group, load_settings: Callable[[], Settings]) -> None:
    """Add `eval` to `cli`; `load_settings` turns a bad setting into a clean error."""

    @cli.command("eval")
    @click.argument("cases", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
    @click.option("--provider", default=None, help="provider name (default: LLM_PROVIDER)")
    @click.option("--model", default=None, help="model name (default: LLM_MODEL)")
    @click.option("--base-url", default=None, help="the provider's base URL (default: LLM_BASE_URL)")
    @click.option("--compare", is_flag=True, help="demonstrations on/off x grammar on/off")
    @click.option("--json", "as_json", is_flag=True, help="the report as JSON, with every case's reply")
    @click.option("--limit", type=click.IntRange(min=1), default=None, help="at most N cases of each file")
    @click.option("--temperature", type=click.FloatRange(0, 2), default=0.0, show_default=True, help="sampling")
    @click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=1234, show_default=True, help="sampling seed")
    @click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True, help="run it all N times")
    @click.option("--native", is_flag=True, help="also through the provider's native function calling (`tools`)")
    @click.option(
        "--native-base-url",
        default=None,
        help="the server native calling goes to, when not the same (llama-cpp-python reads `tools` only "
        "with --chat_format chatml-function-calling)",
    )
    def eval_command(
        cases: tuple[Path, ...],
        provider: str | None,
        model: str | None,
        base_url: str | None,
        compare: bool,
        as_json: bool,
        limit: int | None,
        temperature: float,
        seed: int,
        repeat: int,
        native: bool,
        native_base_url: str | None,
    ) -> None:
        """Run CASES (our JSONL, or BFCL files) against a model, tools in dry-run; print a report card."""
        settings = load_settings()
        overrides = {
            "llm_provider": provider,
            "llm_model": model,
            "llm_base_url": base_url,
            "llm_temperature": temperature,
            "llm_seed": seed,
        }
        try:
            settings = Settings.model_validate(
                {**settings.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
            )
            chain = FallbackChain([build_provider(llm_config(settings))])
        except (ValidationError, ProviderError) as error:
            raise click.ClickException(str(error).splitlines()[0]) from error
        runnable, notes = read_cases(cases, limit)
        grammar = accepts_grammar(chain.primary)
        if not grammar and (compare or settings.llm_grammar == "first_line"):
            notes.append(f"grammar: not offered ({chain.primary.name} does not accept a decoding grammar)")
        odds = chain.primary.reads_odds and settings.llm_decide != "greedy"
        chosen = options(settings, compare=compare, grammar=grammar, odds=odds, native=native)
        tools = build_registry()
        runs: list[CaseRun] = []
        label = f"{chain.primary.name}/{chain.primary.model}"
        total = len(chosen) * len(runnable) * repeat
        for again in range(repeat):
            for option in chosen:
                for case in runnable:
                    if option.native:
                        url = f"{native_base_url.rstrip('/')}/chat/completions" if native_base_url else None
                        run = run_native(case, chain, option, tools, url)
                    else:
                        run = run_case(case, chain, option, tools)
                    runs.append(dataclasses.replace(run, repeat=again))
                    click.echo(f"[{len(runs)}/{total}] {option.label}: {case.id}", err=True)
        chain.close()
        if odds and chain.primary.offers.odds is False:
            notes.append(f"decision by mass: {chain.primary.name} gave no log-probabilities (its runs were greedy)")
        cards = [card(label, option, [run for run in runs if run.option == option]) for option in chosen]
        click.echo(json_report(cards, runs, notes) if as_json else text_report(cards, runs, notes))
        if runs and all(run.failure is not None for run in runs):
            raise click.ClickException(f"the provider answered no case ({runs[0].failure})")
