"""Input caps: what a model line, a tool result or a request body can make the server store or do.

Issue 11, classes 4 and 7. A model's over-long reply and a tool's huge output must be stored
capped (SPEC 12: a tool result at most 64 KiB of contract text, its structured `meta` output at
most 256 KiB; an answer at most `MAX_ANSWER_CHARS`), so they are not replayed whole into every
later context; a request body nested thousands of levels deep, or holding a lone surrogate,
must answer a clear 400 on every endpoint, never a 500; a body bigger than an endpoint takes
is refused before it is read.
"""

from __future__ import annotations

import json

import requests

from testing.attacks import Attack, Outcome, Target
from testing.fake_llm import StreamReply, split_reply

MB = 1024 * 1024
DEEP = 100_000  # levels of nesting in the deep bodies (200-600 KB each)
BODY_ENDPOINTS = (  # every endpoint that reads a JSON body (the unit test walks the whole url_map)
    ("POST", "/chat"),
    ("POST", "/sessions"),
    ("POST", "/api/ai/tool-result"),
    ("POST", "/run"),
    ("POST", "/submit"),
    ("POST", "/activities/generate"),
    ("PATCH", "/api/profile"),
    ("POST", "/api/login"),
    ("POST", "/tools/remember"),
    ("POST", "/tools/memory_sql"),
)


def largest_stored(target: Target, session_id: str) -> int:
    """Bytes of the largest message (content plus meta) the session holds."""
    response = target.get(f"/sessions/{session_id}/messages?limit=200")
    messages = response.json().get("messages", [])
    return max((len(m["content"].encode()) + len(json.dumps(m.get("meta") or {})) for m in messages), default=0)


def chat_turn(target: Target, *replies: str, message: str = "go", session_id: str | None = None) -> requests.Response:
    """One turn whose model replies are `replies`, streamed in 64 KiB pieces (a real server's pace)."""
    target.llm.reset()
    target.llm.queue(*(StreamReply(split_reply(reply, 65_536)) for reply in replies))
    body = {"message": message, **({"session_id": session_id} if session_id else {})}
    return target.post("/chat", json=body)


def long_command_line(target: Target) -> Outcome:
    """The model answers with a 2 MB first line that starts like a command; a later turn replays it."""
    first = chat_turn(target, "/web_search " + "mars " * (2 * MB // 5))
    session_id = first.json().get("session_id")
    if first.status_code != 200 or not session_id:
        return Outcome(first.status_code, len(first.content), "first turn failed")
    second = chat_turn(target, "ok", message="and now?", session_id=session_id)
    replayed = len(json.dumps(target.llm.requests[-1])) if target.llm.requests else 0
    return Outcome(
        second.status_code,
        len(first.content),
        f"next context {replayed // 1024} KiB",
        largest_stored(target, session_id),
    )


def huge_tool_output(target: Target) -> Outcome:
    """`/memory_sql` returning 200 rows of 32,000 characters (6.4 MB of structured output)."""
    sql = (
        "/memory_sql WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) "
        "SELECT i, substr(hex(zeroblob(16000)), 1, 32000) AS wide FROM n"
    )
    response = chat_turn(target, sql, "done")
    session_id = response.json().get("session_id")
    stored = largest_stored(target, session_id) if session_id else 0
    return Outcome(response.status_code, len(response.content), "memory_sql 200 wide rows", stored)


def deep_json_everywhere(target: Target) -> Outcome:
    """A body nested 100,000 levels deep (arrays, then objects) to every JSON endpoint."""
    bodies = ("[" * DEEP + "]" * DEEP, '{"a":' * DEEP + "1" + "}" * DEEP)
    worst: requests.Response | None = None
    for method, path in BODY_ENDPOINTS:
        for body in bodies:
            response = requests.request(
                method,
                f"{target.server.base}{path}",
                data=body,
                timeout=60,
                headers={**target.headers(), "Content-Type": "application/json"},
            )
            if worst is None or response.status_code > worst.status_code:
                worst = response
    assert worst is not None
    return Outcome(worst.status_code, len(worst.content), _code(worst))


def lone_surrogate_run(target: Target) -> Outcome:
    """`POST /run` with a file holding a lone surrogate (valid JSON, not valid Unicode)."""
    body = '{"language": "python", "files": {"main.py": "print(1) # \\ud800"}}'
    response = requests.post(
        f"{target.server.base}/run",
        data=body,
        timeout=60,
        headers={**target.headers(), "Content-Type": "application/json"},
    )
    return Outcome(response.status_code, len(response.content), _code(response))


def huge_body(target: Target) -> Outcome:
    """A 40 MB JSON string to an endpoint that takes a name of 200 characters."""
    body = json.dumps({"name": "a" * 40_000_000})
    response = requests.post(
        f"{target.server.base}/sessions",
        data=body,
        timeout=120,
        headers={**target.headers(), "Content-Type": "application/json"},
    )
    return Outcome(response.status_code, len(response.content), _code(response))


def _code(response: requests.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


ATTACKS: list[Attack] = [
    Attack("model: 2 MB first command line, replayed", long_command_line, deadline_s=10),
    Attack("tool: 6 MB memory_sql output stored", huge_tool_output, deadline_s=5),
    Attack("body: JSON nested 100,000 deep, every endpoint", deep_json_everywhere, deadline_s=5),
    Attack("body: 40 MB JSON string to POST /sessions", huge_body, deadline_s=5),
    Attack(
        "body: lone surrogate in a /run file",
        lone_surrogate_run,
        deadline_s=5,
        env={"JUDGE_ENABLED": "1", "JUDGE_POOL_SIZE": "0"},
    ),
]
