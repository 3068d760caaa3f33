"""Learner tasks (SPEC section 10): the project file format, its importer, answer checks and
the per-learner state machine.

`spec.py` is the file format (pydantic) and the whole-project rules (unique ids, known
dependencies, no cycles); `importer.py` reads YAML or JSON and writes a project in one
transaction; `checks.py` grades an answer by criterion type; `progress.py` is the state
machine (one transition table, one `move`) and the blocking / ordering rules; `review.py` is an
instructor's verdict on a `manual` attempt; `roles.py` says who is course staff. Storage lives in `storage/learner_tasks.py`; the nine
tool units in `tools/learner/`.
"""
