"""Untrusted SQL, run where its time and memory are bounded (SPEC 12, 6a, 10).

A model's `/memory_sql` statement and a learner's `sql_result` answer can cost anything
inside one SQLite call (a blob of many megabytes, one built-in function running for a
minute between two progress-handler checks). So they never run in the server process: a
small pool of worker processes (`pool.SqlBox`, started lazily, reused while warm) runs
them with hard limits, and the server kills a worker at the deadline.

- `protocol`: the jobs, the answers and errors as values, and the pipe framing.
- `limits`: SQLite's own per-connection limits and heap limit, set in the worker.
- `fetch`: rows turned into JSON-safe cells within a byte budget while they are fetched.
- `memory_engine`: the `/memory_sql` views and authorizer (read-only database connection).
- `select_engine`: a task's setup script and the learner's one read-only SELECT.
- `worker`: the worker's main loop (stdlib only, so it starts in a few tens of milliseconds).
- `pool`: the server side: workers, deadlines, kill, cancel.

This package imports nothing from the rest of the product, so a worker starts light.
"""
