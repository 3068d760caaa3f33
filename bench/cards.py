"""The cards of issue 33: our text protocol (greedy and by mass) next to native function calling.

Starts the real model CI installs twice (`testing/llama_server.py`: SmolLM2-135M-Instruct on
llama-cpp-python's server, log-probabilities on): once with the model's own chat template, for
our text protocol, and once with `--chat_format chatml-function-calling`, the only format of
that server that reads a `tools` field, for native calling (that format also HTML-escapes the
prompt, so our text protocol is not run on it), with a context long enough for the schemas. Then `python app.py eval --native --repeat N`
with the product's default settings, once on our case set and once on the first 30 cases of
four BFCL files (`bench/bfcl/`), and prints a summary of each; `--json DIR` keeps the
whole reports (every case's reply).

    .venv/bin/python bench/cards.py [--repeat 3] [--json /tmp/cards]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testing.llama_server import LlamaProcess  # noqa: E402

OURS = [ROOT / "examples" / "eval" / "cases.jsonl"]
# Native calling sends every tool's JSON schema: our 26 commands take about 4,200 prompt tokens
# that way (our text protocol's list about 1,900), past the 4,096 the text server has; SmolLM2
# reads 8,192. Both paths answer at most MAX_TOKENS tokens (llama-cpp-python refuses a request
# whose prompt and answer together exceed its context).
NATIVE_CTX = 8192
MAX_TOKENS = 512
BFCL = [
    ROOT / "bench" / "bfcl" / f"BFCL_v4_{name}.json"
    for name in ("simple_python", "irrelevance", "live_simple", "multiple")
]


def run_eval(text: LlamaProcess, native: LlamaProcess, files: list[Path], repeat: int, limit: int | None) -> str:
    env = {
        **os.environ,
        "LLM_PROVIDER": "openai",
        "LLM_BASE_URL": text.base_url,
        "LLM_MODEL": text.model,
        "LLM_TIMEOUT_S": "300",
        "LLM_MAX_TOKENS": str(MAX_TOKENS),
        "JUDGE_ENABLED": "0",
    }
    command = [sys.executable, "app.py", "eval", *map(str, files), "--native", "--native-base-url", native.base_url]
    command += ["--repeat", str(repeat), "--json"] + (["--limit", str(limit)] if limit else [])
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"eval failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def summary(report: dict[str, Any]) -> str:
    """One line per option: right tool and false commands (each repeat's count), the decision's cost."""
    lines = ["| option | right tool | false commands | decision / first pass |", "|---|---|---|---|"]
    for card in report["cards"]:
        right, false = card["right_tool"], card["false_commands"]
        share = card.get("decide_share")
        cost = (
            "—"
            if share is None
            else f"{card['decide_ms']:,.0f} ms / {card['first_pass_ms']:,.0f} ms ({100 * share:.0f}%)"
        )
        lines.append(
            f"| {card['option']['label']} | {right['hits']}/{right['total']} {card['right_each']} "
            f"| {false['hits']}/{false['total']} {card['false_each']} | {cost} |"
        )
    failures = {card["option"]["label"]: card["failures"] for card in report["cards"] if card["failures"]}
    if failures:
        lines.append(f"\nno reply: {failures}")
    return "\n".join(lines + [f"note: {note}" for note in report["notes"]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="at most N cases of each file (BFCL's have 30 here)")
    parser.add_argument("--only", choices=("ours", "bfcl"), default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write each report as JSON into this folder")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stopped: the servers below still stop
    with tempfile.TemporaryDirectory() as tmp:
        text = LlamaProcess.start(Path(tmp) / "text.log")
        native = LlamaProcess.start(Path(tmp) / "native.log", chat_format="chatml-function-calling", n_ctx=NATIVE_CTX)
        try:
            for name, files in (("ours", OURS), ("bfcl", BFCL)):
                if args.only not in (None, name):
                    continue
                report = json.loads(run_eval(text, native, files, args.repeat, args.limit))
                print(f"## {name}: {len(report['cases']) // max(1, len(report['cards']))} runs per option\n")
                print(summary(report) + "\n", flush=True)
                if args.json is not None:
                    args.json.mkdir(parents=True, exist_ok=True)
                    (args.json / f"{name}.json").write_text(json.dumps(report, indent=1))
        finally:
            text.stop()
            native.stop()


if __name__ == "__main__":
    main()
