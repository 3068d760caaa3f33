"""What reading the branch on screen costs a turn (SPEC 17, `storage.messages.recent_messages`).

Every turn reads its context, the last `CONTEXT_MESSAGES` (40) messages of the active branch,
by walking `parent_id` up from the session's active leaf. This builds one session of about
2,000 messages in which every fifth answer was regenerated twice and every tenth user message
edited once (so the tree has hundreds of branches), then times, on the same database:

  branch   recent_messages(session, 40): the recursive walk from the leaf
  linear   the read before versions existed: the session's last 40 rows by id
  page     recent_messages(session, 200, before_id=…): a page further up the branch
  siblings the versions of a 50-message page (what GET …/messages adds)

    .venv/bin/python bench/branch_read.py [--messages 2000] [--reads 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage.connection import DbConnection
from storage.db import Database
from storage.messages import add_message, recent_messages, set_active_leaf, siblings
from storage.sessions import create_session
from storage.users import create_user

LINEAR = (
    "SELECT id, session_id, role, content, created_at, meta, parent_id FROM chat_messages "
    "WHERE session_id = ? ORDER BY id DESC LIMIT ?"
)


def build(conn: DbConnection, messages: int) -> str:
    user, _ = create_user(conn, "bench")
    session = create_session(conn, user.id).id
    turn = 0
    conn.execute("BEGIN")
    stored = 0
    while stored < messages:
        text = f"question {turn} " + "words " * 20
        question = add_message(conn, session_id=session, user_id=user.id, role="user", content=text)
        add_message(conn, session_id=session, user_id=user.id, role="assistant", content="answer " * 40)
        stored += 2
        if turn % 5 == 0:  # two more versions of the answer
            for _ in range(2):
                set_active_leaf(conn, session, question.id)
                add_message(conn, session_id=session, user_id=user.id, role="assistant", content="again " * 40)
                stored += 1
        if turn % 10 == 0 and question.parent_id is not None:  # an edit: a sibling of the question
            set_active_leaf(conn, session, question.parent_id)
            add_message(conn, session_id=session, user_id=user.id, role="user", content="edited " + text)
            add_message(conn, session_id=session, user_id=user.id, role="assistant", content="answer " * 40)
            stored += 2
        turn += 1
    conn.execute("COMMIT")
    return session


def timed(reads: int, read: Callable[[], object]) -> tuple[float, float]:
    samples = []
    for _ in range(reads):
        started = time.perf_counter()
        read()
        samples.append((time.perf_counter() - started) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        database = Database(Path(folder) / "bench.db")
        database.migrate()
        conn = database.connect()
        session = build(conn, args.messages)
        total = conn.execute("SELECT count(*) FROM chat_messages").fetchone()[0]
        branch = recent_messages(conn, session, 100_000)
        roots = conn.execute(
            "SELECT count(*) FROM chat_messages c WHERE (SELECT count(*) FROM chat_messages s "
            "WHERE s.parent_id IS c.parent_id AND s.session_id = c.session_id) > 1"
        ).fetchone()[0]
        print(f"{total} messages in the session, {len(branch)} on the active branch, {roots} with versions")
        page = recent_messages(conn, session, 50)
        older = recent_messages(conn, session, 400)[0].id
        for name, read in (
            ("branch (40)", lambda: recent_messages(conn, session, 40)),
            ("linear (40)", lambda: conn.execute(LINEAR, (session, 40)).fetchall()),
            ("page (200)", lambda: recent_messages(conn, session, 200, before_id=older)),
            ("siblings (50)", lambda: siblings(conn, session, page)),
        ):
            median, p99 = timed(args.reads, read)
            print(f"{name:14} median {median:7.1f} µs   p99 {p99:7.1f} µs")
        conn.close()


if __name__ == "__main__":
    main()
