"""`/memory_sql` on PostgreSQL: the restricted login role, its per-user views and its grants.

SPEC 6a's rule (one SELECT over `messages`/`memories`, or one UPDATE of memories' content and
importance, this user's rows only) is enforced by PostgreSQL's own privileges, set up here once
per database by the migration step `m101_memory_sql_confinement` (PostgreSQL's side only; a
superuser step):

- A login role of its own (`memsql_<hex>`, NOSUPERUSER NOINHERIT, member of nothing), so no
  `SET ROLE` / `RESET ROLE` can climb to the app's role. Its name and generated password are
  kept in `memory_sql.login`, readable by the app's role only (every server process sharing the
  database finds them there; nothing to copy between hosts).
- Schema `memory_sql` with two security-barrier views, `messages` and `memories`, filtered by
  `memory_sql.bound_user()`: the user id the app bound to the role's current backend (its pid)
  in `memory_sql.bindings`, a table the role cannot read or write. The binding is not a
  setting, so neither `SET` nor `set_config()` can change whose rows the views show; with no
  binding the views are empty. `UPDATE memories` goes through an INSTEAD OF trigger (owner's
  rights) that checks the values as `/remember` does and only records each change (the first
  `memory_sql.cap` of them, and how many rows matched) in transaction-local settings: as on
  SQLite, the statement's WHERE runs with no lock on any row, and the app writes the changes
  afterwards in one short transaction of its own (`tools.memory_sql.apply_changes`).
  (`memories.importance` is shown as numeric so that the trigger sees `2.5` and refuses it,
  as SQLite does, instead of an integer cast of it.)
- The role may only: USAGE on `memory_sql`; SELECT on the two views; UPDATE (content,
  importance) on `memories`; EXECUTE on the two helper functions. `search_path` is
  `memory_sql`; `default_transaction_read_only`, `statement_timeout`, `lock_timeout`,
  `work_mem`, `temp_file_limit` (superuser-only to change) and no parallel workers are the
  role's own settings, besides what each transaction sets.
- What PUBLIC (so every role) may do by default is narrowed in this database: no TEMP tables,
  no USAGE on the schema `public` (the app's tables) or `information_schema`, no SELECT on the
  catalogs (`pg_class`, `pg_user`, `pg_settings`, `pg_stat_activity`…), and EXECUTE on no
  catalog function outside an allow-list of functions that honour PostgreSQL's cancel flag
  (`ALLOWED_FUNCTIONS`, the functions behind operators and immutable casts; nothing that takes
  or returns `xml` or `jsonpath`). So `set_config`, `pg_terminate_backend`, `pg_advisory_lock`,
  `lo_*`, `nextval`, `pg_read_file`, `dblink`, `xpath`, `xmlexists`… are refused by PostgreSQL
  for the role. The app's own role (and the database owner) keep everything: each revocation is
  granted back to them, and they are members of the role, so the app's supervisor connection
  may cancel and terminate its backends (`storage.pg_memory_run`) without being a superuser.

The TEMP revocation is the database's own ACL, which `CREATE DATABASE … TEMPLATE` and a dump
restored without `--create` do not carry over; there the role could still not create a temp
table: only a query or an UPDATE of `memories` ever runs, queries in a READ ONLY transaction.

Catalog privileges belong to the bootstrap superuser, so this step needs a superuser. When
`DATABASE_URL` connects as an ordinary role, the migration leaves the database unconfined
(logged) and `/memory_sql` answers UNAVAILABLE there; `python -m storage.pg_memory_sql <superuser
URL>` confines it later (idempotent).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass

from storage.connection import DbConnection, ScriptConnection

log = logging.getLogger(__name__)

SCHEMA = "memory_sql"
MAX_MEMORY_CHARS = 2000  # same bound as /remember and the SQLite trigger (bounded/sql_memory.py)
IMPORTANCE_RANGE = (1, 10)
ROW_BYTES = 1024 * 1024  # one result row at most (SQLite: a value at most 1 MB)
# transaction-local settings of the UPDATE trigger: rows matched, the cap on rows recorded (set by
# the runner), the recorded changes (one JSON object a line). Only the trigger (owner's rights)
# can write them: the role may not call set_config, and runs no SET.
MATCHED, CAP, CHANGES = "memory_sql.matched", "memory_sql.cap", "memory_sql.changes"
ROLE_CONNECTIONS = 16  # backends of the role at once, every server process together
ROLE_SETTINGS = {
    "search_path": SCHEMA,
    "default_transaction_read_only": "on",
    "statement_timeout": "1s",
    "lock_timeout": "200ms",
    "idle_in_transaction_session_timeout": "5s",
    # each backend's memory: sorts and hashes spill to temporary files past work_mem (hashes
    # past work_mem * hash_mem_multiplier), and those files stop at temp_file_limit
    "work_mem": "4MB",
    "hash_mem_multiplier": "1",
    "maintenance_work_mem": "1MB",
    "temp_buffers": "800kB",
    "temp_file_limit": "16MB",
    "max_parallel_workers_per_gather": "0",
    "jit": "off",
}
# The catalog functions the role may call by name: each one honours PostgreSQL's cancel flag
# (it checks for interrupts in its loops, or does bounded work per call), has no side effect
# and no view of the database or the server. Everything else in pg_catalog is refused by
# PostgreSQL ("permission denied for function …"). Besides these, the role may run the
# functions behind operators (`=`, `<`, `LIKE`, `~`…: immutable or stable), immutable casts and
# the types' text input and output, unless they touch a FORBIDDEN_TYPES type.
ALLOWED_FUNCTIONS = (
    # text
    "length", "char_length", "character_length", "octet_length", "bit_length", "lower", "upper",
    "initcap", "substr", "substring", "left", "right", "strpos", "position", "replace", "translate",
    "btrim", "ltrim", "rtrim", "lpad", "rpad", "repeat", "reverse", "split_part", "starts_with",
    "concat", "concat_ws", "format", "quote_literal", "quote_nullable", "quote_ident", "ascii", "chr",
    "to_hex", "md5", "encode", "decode", "overlay", "normalize", "is_normalized", "unistr",
    "string_to_array", "string_to_table", "array_to_string", "anytextcat", "textanycat", "text",
    "like", "notlike", "like_escape", "similar_escape", "similar_to_escape",
    # regular expressions (PostgreSQL's regex engine checks the cancel flag as it runs)
    "regexp_match", "regexp_matches", "regexp_replace", "regexp_split_to_array",
    "regexp_split_to_table", "regexp_count", "regexp_instr", "regexp_like", "regexp_substr",
    # numbers
    "abs", "ceil", "ceiling", "floor", "round", "trunc", "sign", "sqrt", "cbrt", "power", "pow",
    "exp", "ln", "log", "log10", "mod", "div", "pi", "degrees", "radians", "random", "gcd", "lcm",
    "width_bucket", "scale", "min_scale", "trim_scale", "num_nulls", "num_nonnulls",
    # dates and times
    "now", "statement_timestamp", "transaction_timestamp", "clock_timestamp", "date_part", "extract",
    "date_trunc", "date_bin", "age", "make_date", "make_time", "make_timestamp", "make_interval",
    "to_char", "to_date", "to_timestamp", "to_number", "justify_days", "justify_hours",
    "justify_interval", "isfinite", "timezone", "date", "timestamp", "timestamptz",
    # aggregates and window functions (the executor checks the cancel flag between rows)
    "count", "sum", "avg", "min", "max", "bool_and", "bool_or", "every", "string_agg", "array_agg",
    "stddev", "stddev_pop", "stddev_samp", "variance", "var_pop", "var_samp", "corr",
    "percentile_cont", "percentile_disc", "mode", "row_number", "rank", "dense_rank",
    "percent_rank", "cume_dist", "ntile", "lag", "lead", "first_value", "last_value", "nth_value",
    # arrays and series
    "array_length", "array_lower", "array_upper", "array_ndims", "array_dims", "cardinality",
    "array_position", "array_positions", "array_remove", "array_replace", "array_cat",
    "array_append", "array_prepend", "unnest", "generate_series", "generate_subscripts",
    # JSON (no jsonpath: see FORBIDDEN_TYPES)
    "json_build_object", "json_build_array", "jsonb_build_object", "jsonb_build_array", "to_json",
    "to_jsonb", "row_to_json", "array_to_json", "json_object", "jsonb_object", "json_agg",
    "jsonb_agg", "json_object_agg", "jsonb_object_agg", "json_array_length", "jsonb_array_length",
    "json_array_elements", "json_array_elements_text", "jsonb_array_elements",
    "jsonb_array_elements_text", "json_each", "json_each_text", "jsonb_each", "jsonb_each_text",
    "json_object_keys", "jsonb_object_keys", "json_typeof", "jsonb_typeof", "json_extract_path",
    "json_extract_path_text", "jsonb_extract_path", "jsonb_extract_path_text", "jsonb_set",
    "jsonb_insert", "jsonb_pretty", "json_strip_nulls", "jsonb_strip_nulls",
    # the row size check of every query (storage/pg_memory_run.py)
    "pg_column_size",
)  # fmt: skip
# Types no allowed function may take or return. XML: libxml2 evaluates XPath (xpath(),
# xmlexists(), XMLTABLE) and parses documents without ever looking at PostgreSQL's cancel flag,
# so neither statement_timeout, nor a cancel, nor pg_terminate_backend stops it until it
# returns (a cubic XPath ran for minutes). jsonpath: its evaluator is not known to honour it.
# XML syntax that calls no function (XMLPARSE, XMLTABLE…) is refused from the statement's plan
# (storage/pg_memory_run.py).
FORBIDDEN_TYPES = ("xml", "_xml", "jsonpath", "_jsonpath")


@dataclass(frozen=True)
class Login:
    """The restricted role's credentials (in `memory_sql.login`)."""

    role: str
    password: str


def m101_memory_sql_confinement(conn: ScriptConnection) -> None:
    """The restricted role, its views and grants (see the module doc); skipped, logged, for a
    role that is not a superuser (then `/memory_sql` answers UNAVAILABLE on this database)."""
    if not is_superuser(conn):
        log.warning(
            "memory_sql: %s is not a superuser; /memory_sql stays unavailable on this PostgreSQL database "
            "until `python -m storage.pg_memory_sql <superuser URL>` confines it",
            _scalar(conn, "SELECT current_user"),
        )
        return
    confine(conn)


def m102_memory_sql_allow_list(conn: ScriptConnection) -> None:
    """Confine again (idempotent) with the narrower function allow-list: a database confined by
    m101 before it let the role call XML functions, which no cancel stops. Skipped, logged, like
    m101, for a role that is not a superuser."""
    m101_memory_sql_confinement(conn)


def is_superuser(conn: DbConnection) -> bool:
    return bool(_scalar(conn, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"))


def confine(conn: ScriptConnection) -> Login:
    """Create or refresh everything; idempotent. Runs inside the caller's transaction."""
    _script_on(conn, f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    _script_on(
        conn,
        f"""
        CREATE TABLE IF NOT EXISTS {SCHEMA}.login (role TEXT PRIMARY KEY, password TEXT NOT NULL);
        CREATE UNLOGGED TABLE IF NOT EXISTS {SCHEMA}.bindings (pid INTEGER PRIMARY KEY, user_id BIGINT NOT NULL);
        REVOKE ALL ON {SCHEMA}.login, {SCHEMA}.bindings FROM PUBLIC;
        """,
    )
    login = _ensure_role(conn)
    _create_objects(conn, login)
    _narrow_functions(conn, login.role, _trusted_roles(conn))
    return login


def _ensure_role(conn: ScriptConnection) -> Login:
    """The stored login, its role created (or its password reset) to match; a new one if none."""
    row = conn.execute(f"SELECT role, password FROM {SCHEMA}.login").fetchone()
    if row is None:
        login = Login(role=f"memsql_{secrets.token_hex(6)}", password=secrets.token_hex(24))
        conn.execute(f"INSERT INTO {SCHEMA}.login (role, password) VALUES (?, ?)", (login.role, login.password))
    else:
        login = Login(role=str(row[0]), password=str(row[1]))
    _check_name(login.role)
    _check_name(login.password)
    exists = _scalar(conn, "SELECT count(*) FROM pg_roles WHERE rolname = ?", (login.role,))
    verb = "ALTER" if exists else "CREATE"
    _script_on(
        conn,
        f"{verb} ROLE {login.role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION "
        f"NOBYPASSRLS CONNECTION LIMIT {ROLE_CONNECTIONS} PASSWORD '{login.password}'",
    )
    for name, value in ROLE_SETTINGS.items():
        _script_on(conn, f"ALTER ROLE {login.role} SET {name} = '{value}'")
    return login


def _create_objects(conn: ScriptConnection, login: Login) -> None:
    """The helper functions, the two views and their trigger, and every grant and revocation."""
    role = login.role
    low, high = IMPORTANCE_RANGE
    owners = _trusted_roles(conn)
    database = _database(conn)
    _script_on(
        conn,
        f"""
            CREATE OR REPLACE FUNCTION {SCHEMA}.bound_user() RETURNS BIGINT
                LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
                AS $$ SELECT user_id FROM {SCHEMA}.bindings WHERE pid = pg_backend_pid() $$;
            CREATE OR REPLACE FUNCTION {SCHEMA}.row_fits(size INTEGER) RETURNS BOOLEAN
                LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog AS $$
            BEGIN
                IF size > {ROW_BYTES} THEN
                    RAISE EXCEPTION 'a result row is % bytes; rows are at most {ROW_BYTES // 1024} KiB', size
                        USING ERRCODE = 'program_limit_exceeded';
                END IF;
                RETURN true;
            END $$;
            DROP VIEW IF EXISTS {SCHEMA}.messages, {SCHEMA}.memories;
            CREATE VIEW {SCHEMA}.messages WITH (security_barrier) AS
                SELECT id, session_id, role, content, created_at FROM public.chat_messages
                WHERE user_id = (SELECT {SCHEMA}.bound_user());
            CREATE VIEW {SCHEMA}.memories WITH (security_barrier) AS
                SELECT id, content, importance::numeric AS importance, created_at, updated_at FROM public.user_memories
                WHERE user_id = (SELECT {SCHEMA}.bound_user());
            CREATE OR REPLACE FUNCTION {SCHEMA}.update_memory() RETURNS trigger
                LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
            DECLARE
                matched INTEGER := coalesce(nullif(current_setting('{MATCHED}', true), ''), '0')::INTEGER + 1;
            BEGIN
                IF NEW.content IS DISTINCT FROM OLD.content AND (NEW.content IS NULL OR btrim(NEW.content) = ''
                        OR char_length(NEW.content) > {MAX_MEMORY_CHARS}) THEN
                    RAISE EXCEPTION 'content must be non-empty text of at most {MAX_MEMORY_CHARS} characters'
                        USING ERRCODE = 'check_violation';
                END IF;
                IF NEW.importance IS DISTINCT FROM OLD.importance AND (NEW.importance IS NULL
                        OR NEW.importance <> trunc(NEW.importance) OR NEW.importance NOT BETWEEN {low} AND {high}) THEN
                    RAISE EXCEPTION 'importance must be an integer from {low} to {high}'
                        USING ERRCODE = 'check_violation';
                END IF;
                PERFORM set_config('{MATCHED}', matched::TEXT, true);
                IF matched <= coalesce(nullif(current_setting('{CAP}', true), ''), '0')::INTEGER THEN
                    PERFORM set_config('{CHANGES}', coalesce(current_setting('{CHANGES}', true), '')
                        || json_build_object('id', OLD.id, 'old_content', OLD.content, 'old_importance', OLD.importance,
                                             'content', NEW.content, 'importance', NEW.importance)::TEXT
                        || E'\\n', true);
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER update_memory INSTEAD OF UPDATE ON {SCHEMA}.memories
                FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.update_memory();

            REVOKE ALL ON SCHEMA {SCHEMA} FROM PUBLIC;
            REVOKE ALL ON ALL TABLES IN SCHEMA {SCHEMA} FROM PUBLIC;
            REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {SCHEMA} FROM PUBLIC;
            GRANT USAGE ON SCHEMA {SCHEMA} TO {role}, {owners};
            GRANT SELECT, INSERT, UPDATE, DELETE ON {SCHEMA}.login, {SCHEMA}.bindings TO {owners};
            GRANT SELECT ON {SCHEMA}.messages, {SCHEMA}.memories TO {role};
            GRANT UPDATE (content, importance) ON {SCHEMA}.memories TO {role};
            GRANT EXECUTE ON FUNCTION {SCHEMA}.bound_user(), {SCHEMA}.row_fits(INTEGER) TO {role};
            GRANT {role} TO {owners};

            REVOKE TEMPORARY ON DATABASE "{database}" FROM PUBLIC;
            GRANT TEMPORARY ON DATABASE "{database}" TO {owners};
            REVOKE ALL ON SCHEMA public, information_schema FROM PUBLIC;
            GRANT USAGE ON SCHEMA public, information_schema TO {owners};
            REVOKE ALL ON ALL TABLES IN SCHEMA pg_catalog, information_schema FROM PUBLIC;
            GRANT SELECT ON ALL TABLES IN SCHEMA pg_catalog, information_schema TO {owners};
            """,
    )


def _narrow_functions(conn: ScriptConnection, role: str, owners: str) -> None:
    """EXECUTE on catalog functions: the role gets the allowed ones (`_ALLOWED`), PUBLIC loses
    every other one, granted back to the trusted roles instead. Idempotent: a database
    confined by an older list is brought to this one."""
    allowed = allowed_signatures(conn)
    refused = conn.execute(
        """SELECT p.oid::regprocedure::text FROM pg_proc p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind IN ('f', 'a', 'w')
          AND p.oid::regprocedure::text <> ALL(?) AND has_function_privilege(?, p.oid, 'EXECUTE')""",
        (allowed, role),
    ).fetchall()
    signatures = ", ".join(str(row[0]) for row in refused)
    if signatures:
        _script_on(
            conn,
            f"REVOKE EXECUTE ON ROUTINE {signatures} FROM PUBLIC, {role}; "
            f"GRANT EXECUTE ON ROUTINE {signatures} TO {owners}",
        )
    if allowed:  # explicitly: PUBLIC may have lost one of them to an older confinement
        _script_on(conn, f"GRANT EXECUTE ON ROUTINE {', '.join(allowed)} TO {role}")


# The signatures the role may execute: ALLOWED_FUNCTIONS by name, and the functions behind
# operators (immutable or stable), immutable casts and the text forms of types (not the reg*
# types, which look names up in the catalogs); none that takes or returns a forbidden type.
_ALLOWED = """SELECT p.oid::regprocedure::text FROM pg_proc p
    WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind IN ('f', 'a', 'w')
      AND (p.proname = ANY(?)
           OR (p.provolatile IN ('i', 's') AND EXISTS (SELECT 1 FROM pg_operator o WHERE o.oprcode = p.oid))
           OR (p.provolatile = 'i' AND EXISTS (SELECT 1 FROM pg_cast c WHERE c.castfunc = p.oid))
           OR (p.provolatile IN ('i', 's') AND EXISTS (SELECT 1 FROM pg_type t
               WHERE p.oid IN (t.typinput, t.typoutput) AND t.typname NOT LIKE 'reg%')))
      AND NOT EXISTS (SELECT 1 FROM pg_type t
                      WHERE t.oid = ANY(p.prorettype || p.proargtypes::oid[] || coalesce(p.proallargtypes, '{}'))
                        AND t.typname = ANY(?))
    ORDER BY 1"""


def allowed_signatures(conn: DbConnection) -> list[str]:
    """The catalog functions the role may execute (for tests and the operator)."""
    rows = conn.execute(_ALLOWED, (list(ALLOWED_FUNCTIONS), list(FORBIDDEN_TYPES))).fetchall()
    return [str(row[0]) for row in rows]


def _trusted_roles(conn: DbConnection) -> str:
    """The app's role (current_user) and the database owner, quoted for a GRANT."""
    row = conn.execute(
        "SELECT current_user, pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    names = dict.fromkeys(str(name) for name in row)
    return ", ".join('"' + name.replace('"', '""') + '"' for name in names)


def _database(conn: DbConnection) -> str:
    return str(_scalar(conn, "SELECT current_database()")).replace('"', '""')


def read_login(conn: DbConnection) -> Login | None:
    """The restricted role's credentials, or None when this database is not confined."""
    exists = _scalar(conn, "SELECT to_regclass(?) IS NOT NULL", (f"{SCHEMA}.login",))
    if not exists:
        return None
    row = conn.execute(f"SELECT role, password FROM {SCHEMA}.login").fetchone()
    return None if row is None else Login(role=str(row[0]), password=str(row[1]))


def bind(conn: DbConnection, pid: int, user_id: int) -> None:
    """Show `user_id`'s rows to the restricted backend `pid` (autocommit: visible at once)."""
    conn.execute(
        f"INSERT INTO {SCHEMA}.bindings (pid, user_id) VALUES (?, ?) "
        "ON CONFLICT (pid) DO UPDATE SET user_id = EXCLUDED.user_id",
        (pid, user_id),
    )


def unbind(conn: DbConnection, pid: int) -> None:
    conn.execute(f"DELETE FROM {SCHEMA}.bindings WHERE pid = ?", (pid,))


def _check_name(value: str) -> None:
    """Role names and passwords are generated hex; anything else in the table is refused, as
    they are written into DDL, which takes no parameters."""
    if not value.replace("_", "").isalnum() or not value.isascii():
        raise ValueError(f"{SCHEMA}.login holds an unexpected value")


def _scalar(conn: DbConnection, sql: str, params: tuple[object, ...] = ()) -> object:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def _script_on(conn: ScriptConnection, sql: str) -> None:
    conn.script(sql)
