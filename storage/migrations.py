"""Append-only, named schema migrations.

Each migration is a function taking a connection. `MIGRATIONS` lists them in order;
`migrate()` applies the ones not yet recorded in `_migrations`. Never edit a migration
that has shipped: add a new one instead, so every database reaches the same schema.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from storage.connection import DbConnection, Migration


def execute_script(conn: DbConnection, script: str) -> None:
    """Run a multi-statement script inside the caller's transaction.

    `Connection.executescript` commits any open transaction first, which would make a
    half-applied migration permanent; splitting on complete statements keeps it atomic.
    """
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            conn.execute(pending)
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement in migration: {pending.strip()[:80]}")


def m001_initial(conn: DbConnection) -> None:
    """Users with hashed tokens, sessions, messages (with JSON meta) and memories.

    The message and memory tables are named `chat_messages` and `user_memories`, not
    `messages` and `memories`: those two names belong to the per-user views that
    `/memory_sql` creates in the TEMP schema, and a trigger on such a view must be able to
    name the base table unqualified without resolving back to the view.
    """
    execute_script(
        conn,
        """
        CREATE TABLE users (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            role TEXT NOT NULL DEFAULT 'user',
            profile TEXT NOT NULL DEFAULT '{}',
            created_at TEXT NOT NULL
        );
        CREATE TABLE api_tokens (
            id INTEGER PRIMARY KEY,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            token_hash TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL
        );
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX sessions_by_user ON sessions(user_id, updated_at);
        CREATE TABLE chat_messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            meta TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX messages_by_session ON chat_messages(session_id, id);
        CREATE INDEX messages_by_user ON chat_messages(user_id, id);
        CREATE TABLE user_memories (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            content TEXT NOT NULL,
            importance INTEGER NOT NULL DEFAULT 1,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX memories_by_user ON user_memories(user_id, id);
        """,
    )


def m002_full_text_search(conn: DbConnection) -> None:
    """FTS5 indexes over messages and memories, kept in sync by triggers.

    External-content tables: the text lives once, in the base table; the index holds
    only tokens, and `snippet()` reads the text back through `content=`.
    """
    execute_script(
        conn,
        """
        CREATE VIRTUAL TABLE chat_messages_fts USING fts5(
            content, content='chat_messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER chat_messages_fts_ai AFTER INSERT ON chat_messages BEGIN
            INSERT INTO chat_messages_fts(rowid, content) VALUES (new.id, new.content);
        END;
        CREATE TRIGGER chat_messages_fts_ad AFTER DELETE ON chat_messages BEGIN
            INSERT INTO chat_messages_fts(chat_messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        END;
        CREATE TRIGGER chat_messages_fts_au AFTER UPDATE OF content ON chat_messages BEGIN
            INSERT INTO chat_messages_fts(chat_messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
            INSERT INTO chat_messages_fts(rowid, content) VALUES (new.id, new.content);
        END;
        CREATE VIRTUAL TABLE user_memories_fts USING fts5(
            content, content='user_memories', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER user_memories_fts_ai AFTER INSERT ON user_memories BEGIN
            INSERT INTO user_memories_fts(rowid, content) VALUES (new.id, new.content);
        END;
        CREATE TRIGGER user_memories_fts_ad AFTER DELETE ON user_memories BEGIN
            INSERT INTO user_memories_fts(user_memories_fts, rowid, content) VALUES ('delete', old.id, old.content);
        END;
        CREATE TRIGGER user_memories_fts_au AFTER UPDATE OF content ON user_memories BEGIN
            INSERT INTO user_memories_fts(user_memories_fts, rowid, content) VALUES ('delete', old.id, old.content);
            INSERT INTO user_memories_fts(rowid, content) VALUES (new.id, new.content);
        END;
        """,
    )


def m003_session_activity(conn: DbConnection) -> None:
    """A session's `updated_at` follows its newest message, kept by the database itself.

    Every stored message marks its session active in the same statement, so no code path
    can forget to, and a turn saves one write.
    """
    execute_script(
        conn,
        """
        CREATE TRIGGER chat_messages_touch_session AFTER INSERT ON chat_messages BEGIN
            UPDATE sessions SET updated_at = new.created_at WHERE id = new.session_id;
        END;
        """,
    )


def m004_activities_problems_submissions(conn: DbConnection) -> None:
    """Generated activities, their judge-verified problems, and learners' submissions.

    A problem's reference solution and hidden tests live only here (JSON columns); the
    learner's view of a problem is a projection that leaves them out.
    """
    execute_script(
        conn,
        """
        CREATE TABLE activities (
            id TEXT PRIMARY KEY,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            topic TEXT NOT NULL,
            language TEXT NOT NULL,
            difficulty TEXT NOT NULL,
            requested INTEGER NOT NULL,
            status TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX activities_by_user ON activities(user_id, created_at);
        CREATE TABLE problems (
            id TEXT PRIMARY KEY,
            activity_id TEXT REFERENCES activities(id) ON DELETE CASCADE,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            language TEXT NOT NULL,
            difficulty TEXT NOT NULL,
            title TEXT NOT NULL,
            statement TEXT NOT NULL,
            starter_files TEXT NOT NULL,
            reference_files TEXT NOT NULL,
            tests TEXT NOT NULL,
            position INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL
        );
        CREATE INDEX problems_by_activity ON problems(activity_id, position);
        CREATE TABLE submissions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            problem_id TEXT NOT NULL REFERENCES problems(id) ON DELETE CASCADE,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            language TEXT NOT NULL,
            files TEXT NOT NULL,
            status TEXT NOT NULL,
            verdict TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX submissions_by_user_problem ON submissions(user_id, problem_id, id);
        """,
    )


def m005_learner_tasks(conn: DbConnection) -> None:
    """Learner task projects (SPEC section 10) and every per-learner record about them.

    `tasks` holds the imported templates (JSON columns for dependencies, objectives and
    criteria; `retired` = removed from the file, kept so progress survives a re-import).
    Everything a learner does is keyed by (learner, task): lazily created progress rows
    (absent = `open`), numbered attempts, comments (`learner_id` NULL = shared), the status
    audit trail (`task_events`, which keeps `go_back` reasons) and help requests.
    """
    execute_script(
        conn,
        """
        CREATE TABLE task_projects (
            id TEXT PRIMARY KEY,
            title TEXT NOT NULL,
            description TEXT NOT NULL DEFAULT '',
            source_hash TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE TABLE tasks (
            pk INTEGER PRIMARY KEY,
            project_id TEXT NOT NULL REFERENCES task_projects(id) ON DELETE CASCADE,
            id TEXT NOT NULL,
            title TEXT NOT NULL,
            description TEXT NOT NULL,
            task_type TEXT NOT NULL CHECK (task_type IN ('task', 'subtask')),
            parent_id TEXT,
            dependencies TEXT NOT NULL DEFAULT '[]',
            priority INTEGER NOT NULL,
            learning_objectives TEXT NOT NULL DEFAULT '[]',
            acceptance_criteria TEXT NOT NULL DEFAULT '[]',
            position INTEGER NOT NULL,
            content_hash TEXT NOT NULL,
            retired INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            UNIQUE (project_id, id)
        );
        CREATE INDEX tasks_by_id ON tasks(id);
        CREATE TABLE task_progress (
            learner_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            task_pk INTEGER NOT NULL REFERENCES tasks(pk) ON DELETE CASCADE,
            status TEXT NOT NULL CHECK (status IN ('open', 'in_progress', 'submitted', 'closed')),
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (learner_id, task_pk)
        );
        CREATE TABLE task_attempts (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            learner_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            task_pk INTEGER NOT NULL REFERENCES tasks(pk) ON DELETE CASCADE,
            attempt INTEGER NOT NULL,
            answer TEXT NOT NULL,
            result TEXT NOT NULL
                CHECK (result IN ('passed', 'failed', 'pending_review', 'superseded', 'rejected')),
            checks TEXT NOT NULL,
            reviewed_by INTEGER REFERENCES users(id) ON DELETE SET NULL,
            review_note TEXT,
            reviewed_at TEXT,
            created_at TEXT NOT NULL,
            UNIQUE (learner_id, task_pk, attempt)
        );
        CREATE INDEX task_attempts_pending ON task_attempts(result, id);
        CREATE TABLE task_comments (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            task_pk INTEGER NOT NULL REFERENCES tasks(pk) ON DELETE CASCADE,
            learner_id INTEGER REFERENCES users(id) ON DELETE CASCADE,
            author_id INTEGER REFERENCES users(id) ON DELETE SET NULL,
            text TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX task_comments_by_task ON task_comments(task_pk, learner_id, id);
        CREATE TABLE task_events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            learner_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            task_pk INTEGER NOT NULL REFERENCES tasks(pk) ON DELETE CASCADE,
            actor_id INTEGER REFERENCES users(id) ON DELETE SET NULL,
            action TEXT NOT NULL,
            from_status TEXT NOT NULL,
            to_status TEXT NOT NULL,
            reason TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX task_events_by_learner ON task_events(learner_id, task_pk, id);
        CREATE TABLE help_requests (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            learner_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            task_pk INTEGER NOT NULL REFERENCES tasks(pk) ON DELETE CASCADE,
            message TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'resolved')),
            created_at TEXT NOT NULL,
            resolved_by INTEGER REFERENCES users(id) ON DELETE SET NULL,
            resolved_at TEXT
        );
        CREATE INDEX help_requests_by_status ON help_requests(status, id);
        """,
    )


def m006_web_sessions(conn: DbConnection) -> None:
    """Server-side web UI sessions: the cookie carries only a random id, whose hash is kept
    here with its user, the token that opened it (revoking the token ends it) and an expiry."""
    execute_script(
        conn,
        """
        CREATE TABLE web_sessions (
            id_hash TEXT PRIMARY KEY,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            token_id INTEGER NOT NULL REFERENCES api_tokens(id) ON DELETE CASCADE,
            created_at TEXT NOT NULL,
            expires_at TEXT NOT NULL
        );
        CREATE INDEX web_sessions_by_user ON web_sessions(user_id, created_at);
        CREATE INDEX web_sessions_by_token ON web_sessions(token_id);
        """,
    )


MIGRATIONS: tuple[Migration, ...] = (
    m001_initial,
    m002_full_text_search,
    m003_session_activity,
    m004_activities_problems_submissions,
    m005_learner_tasks,
    m006_web_sessions,
)


def migrate(conn: DbConnection, migrations: Sequence[Migration] = MIGRATIONS) -> list[str]:
    """Apply pending migrations in order, each in its own transaction; return their names.

    `migrations` is the product's list; a test passes its own (a failing step, a fixed one).

    Several processes may start at once on a fresh file (two servers, a server and a CLI
    command). Each migration's transaction takes the write lock first (`BEGIN IMMEDIATE`,
    which waits on the busy timeout) and only then reads whether the migration is recorded,
    so a process that waited finds the other's work done instead of applying it again
    ("table already exists"). The first read, outside any lock, only spares every later
    start the write lock when the schema is already current.
    """
    applied: list[str] = []
    for migration in migrations:
        name = migration.__name__
        if name in recorded_migrations(conn):
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
            if name in recorded_migrations(conn):  # applied by another process while this one waited
                conn.execute("ROLLBACK")
                continue
            migration(conn)
            conn.execute(
                "INSERT INTO _migrations(name, applied_at) VALUES (?, strftime('%Y-%m-%dT%H:%M:%fZ','now'))",
                (name,),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied


def recorded_migrations(conn: DbConnection) -> set[str]:
    """Names in `_migrations` (none while the table does not exist yet)."""
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'").fetchone()
    return {row[0] for row in conn.execute("SELECT name FROM _migrations")} if exists else set()
