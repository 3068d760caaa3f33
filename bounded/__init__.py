"""Work on untrusted input, run where its time and memory are bounded (SPEC 12).

A regular expression, a web page or an image header can cost anything inside one call of
the engine that handles it (`regex` expands a counted repetition at compile time, lxml and
trafilatura build trees of every tag), and no check between two calls can stop that. So
such work runs in a fresh child process with a hard address-space limit, killed at its
deadline, and only a JSON answer of bounded size comes back.

- `worker`: the server side: start the child, stream its input, kill it at the deadline or
  on cancel, read its answer (`run(job, limits)` -> `Done | JobFailed`).
- `child`: the child's main (stdlib only): limits, then the job's function.
- `regex_search`, `html_text`: the jobs (each imports only what it needs).

This package imports nothing from the rest of the product except `cancellation`, so a
child starts light.
"""
