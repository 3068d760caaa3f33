"""Untrusted work, run where its time and memory are bounded (SPEC 12): one facility for all of it.

A model's SQL, a regular expression or a web page can cost anything inside one call of the
engine that handles it (one SQLite function call, `regex` expanding a counted repetition at
compile time, lxml and trafilatura building trees of every tag), and no check between two
calls can stop that. So such work runs in worker processes with a hard address-space limit,
a CPU limit, and a kill at its deadline, and only a JSON answer of bounded size comes back.

Server side:
- `jobs`: the values: `Kind` (a sort of work and its worker), `Job`, `Limits`, `Done` /
  `JobFailed` with a `Failure` kind (timeout, memory, too_large, cancelled, crashed, busy...).
- `kinds`: the product's kinds: `SQL`, `SEARCH`, `PAGES`.
- `pool`: `WorkerPool`, one per app: the global cap (`SANDBOX_WORKERS`), warm workers per
  kind, waiting for a slot within the job's deadline, a fair share per user.
- `worker`: one worker process: start, stream a job's input, deadline and cancel, kill.
- `sql`: the SQL kind's jobs run through the pool, their failures in the SQL tools' words.

Worker side (imported only in the worker, stdlib only except the job modules):
- `protocol`: the frames on the pipes; `child`: the worker's main loop and its limits.
- `sql_jobs` (with `sql_memory`, `sql_select`, `sql_limits`, `sql_fetch`, `sql_values`),
  `regex_search`, `html_text`: the jobs, each kind importing only what it needs.

This package imports nothing from the rest of the product except `foundation`'s
`cancellation` and `fair_share` (server side), so a worker starts light.
"""
