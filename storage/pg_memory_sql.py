"""`python -m storage.pg_memory_sql <superuser URL>`: confine a PostgreSQL database for `/memory_sql`.

The migration step `m101_memory_sql_confinement` does this when the app's role is a superuser;
otherwise it is skipped (logged) and an operator runs this command later, with a superuser's
URL (`storage.pg_confinement` says what it sets up). Idempotent.
"""

from __future__ import annotations

import sys

from storage.pg_confinement import confine
from storage.pg_connection import connect_pg


def main(argv: list[str]) -> int:
    """`python -m storage.pg_memory_sql <superuser URL>`: confine a database later."""
    if len(argv) != 2:
        print("usage: python -m storage.pg_memory_sql postgresql://SUPERUSER@HOST/DB", file=sys.stderr)
        return 2
    conn = connect_pg(argv[1])
    try:
        conn.execute("BEGIN")
        try:
            login = confine(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()
    print(f"confined: /memory_sql runs as role {login.role}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
