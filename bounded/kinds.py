"""The product's kinds of untrusted work, each with its own warm workers (see `jobs.Kind`).

Memory budgets are what one job may add to a worker that has already imported its modules.
"""

from __future__ import annotations

from bounded.jobs import Kind

# /memory_sql and task `sql_result` checks: stdlib only (sqlite3), so `-S` and a fast start.
SQL = Kind("sql", ("bounded.sql_jobs",), memory_mb=64, site_packages=False, keep_warm=2)
# /search_files: compiling and running one regex over the files streamed to it.
SEARCH = Kind("search", ("bounded.regex_search",), memory_mb=64)
# /open_url: lxml and trafilatura (about 0.4 s and 38 MB to import) are loaded once per worker.
PAGES = Kind("pages", ("bounded.html_text",), memory_mb=64, warm_up="bounded.html_text:warm_up")
