"""The SQL kind's job, run in a `bounded.child` worker (stdlib only, so the worker starts with `-S`).

`run(args, inputs)` turns `args` back into a `MemoryJob` or `SelectJob`, runs it with the
engine's own limits (`sql_limits`, `sql_memory`, `sql_select`), and answers
`{"ok": true, "answer": …}` or `{"ok": false, "error": {"code", "message"}}`: a statement's
failure is an answer the model or learner can act on, not a failure of the worker. It calls
`inputs.started()` once the trusted set-up (views, a task's script) is done, which starts the
server's deadline clock for the statement. What the worker itself enforces around it (the
address-space and CPU limits, MemoryError, retiring a grown worker) is `bounded.child`'s.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bounded.child import Inputs
from bounded.sql_memory import Refused as MemoryRefused
from bounded.sql_memory import run_memory_job
from bounded.sql_select import Refused as SelectRefused
from bounded.sql_select import run_select_job
from bounded.sql_values import MemoryJob, SelectJob, SqlError, job_from_dict


def run(args: dict[str, Any], inputs: Inputs) -> dict[str, Any]:
    """One job to one answer; every failure of the statement or the set-up is a value."""
    try:
        job = job_from_dict(args)
    except (TypeError, ValueError) as error:
        return _error(SqlError("UNAVAILABLE", f"bad job: {error}"))
    try:
        if isinstance(job, MemoryJob):
            answer: Any = run_memory_job(job, inputs.started)
        else:
            assert isinstance(job, SelectJob)
            answer = run_select_job(job, inputs.started)
    except (MemoryRefused, SelectRefused) as refused:
        return _error(refused.error)
    except MemoryError:
        raise  # the worker answers `memory` and retires (bounded.child)
    except Exception as error:  # a setup script or database that cannot be used: not the statement's fault
        return _error(SqlError("UNAVAILABLE", f"the SQL engine failed: {type(error).__name__}: {str(error)[:200]}"))
    return {"ok": True, "answer": asdict(answer)}


def _error(error: SqlError) -> dict[str, Any]:
    return {"ok": False, "error": {"code": error.code, "message": error.message}}
