"""Protocol evaluation (SPEC 15): how well a model follows the command protocol.

`python app.py eval CASES` (`cli/eval.py`) reads cases (`cases.py`: our JSONL format and the
Berkeley Function Calling Leaderboard's files), runs each through the real prompt builder,
detector and router against a provider with every tool in dry-run (`dryrun.py`, `run.py`),
scores the calls (`score.py`) and prints a report card per model and option (`report.py`).

It may import `pipeline/`, `commands/`, `tools/`, `storage.messages`, `providers` and
`config/`; nothing in the product imports it.
"""
