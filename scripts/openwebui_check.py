"""The real Open WebUI in front of our `/v1`: start both, drive Open WebUI's own HTTP API, check.

Run by `scripts/openwebui_check.sh` (which finds or creates Open WebUI's venv). Starts the
orchestrator (scripted provider, `tests/fixtures/openwebui/replies.json`, its own temporary
data), a recording proxy (`scripts/openwebui_proxy.py`) and Open WebUI (offline, no auth)
whose only OpenAI connection is the proxy, each on a free loopback port. Then, through
Open WebUI only:
- its model list shows `orchestrator`;
- `POST /api/chat/completions` as its API documents it, non-streamed and streamed (plain
  and tool turns): our answer arrives unchanged, the `<details type="tool_calls">` block
  included; an image part arrives as the turn's image;
- a chat as its web frontend drives it (a new chat, a follow-up that resends the history
  with our block in it, a question answered by the next message): the answers Open WebUI
  stores parse with its own frontend rules (`src/lib/utils/marked/extension.ts`:
  `/^<details(\\s+[^>]*)?>\\n/` then `/(\\w+)="(.*?)"/g`, values through `html-entities`
  `decode`, `ToolCallDisplay.svelte`: `JSON.parse` of `arguments` and `result`), our side
  stored no tool block in imported history, and the answer reached the profile.
Prints one PASS/FAIL line per check and exits 1 on any failure. `--record DIR` writes
what Open WebUI sent to our `/v1` (the fixtures of `tests/api/test_openwebui_requests.py`).
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from openwebui_proxy import serve  # noqa: E402

from testing.hostile import free_port, running_server  # noqa: E402

REPLIES = ROOT / "tests" / "fixtures" / "openwebui" / "replies.json"
DETAILS_OPEN = re.compile(r"^<details(\s+[^>]*)?>\n", re.M)  # Open WebUI's detailsRegex (anchored per block)
ATTRIBUTE = re.compile(r'(\w+)="(.*?)"')  # Open WebUI's parseAttributes
STARTUP_S = 240


class Check:
    """Named results, printed as they come."""

    def __init__(self) -> None:
        self.failures = 0

    def __call__(self, name: str, ok: bool, detail: str = "") -> bool:
        print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""), flush=True)
        self.failures += 0 if ok else 1
        return ok


def png_data_url() -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 30, 30)).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def owui_blocks(content: str) -> list[dict[str, Any]]:
    """The tool-call blocks of a message as Open WebUI's frontend reads them."""
    blocks = []
    for match in DETAILS_OPEN.finditer(content):
        attributes = {key: html.unescape(value) for key, value in ATTRIBUTE.findall(match.group(0))}
        if attributes.get("type") == "tool_calls":
            attributes["arguments"] = json.loads(attributes.get("arguments") or "null")
            attributes["result"] = json.loads(attributes.get("result") or "null")
            blocks.append(attributes)
    return blocks


@contextmanager
def open_webui(venv: Path, openai_base: str, key: str, workdir: Path, log: Path) -> Iterator[str]:
    """Open WebUI serving on a free port, offline, no login, one OpenAI connection."""
    port = free_port()
    env = {
        **os.environ,
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "DATA_DIR": str(workdir),
        "WEBUI_AUTH": "false",
        "WEBUI_SECRET_KEY": uuid.uuid4().hex,
        "ENABLE_OLLAMA_API": "false",
        "OPENAI_API_BASE_URL": openai_base,
        "OPENAI_API_KEY": key,
        "ANONYMIZED_TELEMETRY": "false",
        "DO_NOT_TRACK": "true",
        "SCARF_NO_ANALYTICS": "true",
    }
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(venv / "bin" / "open-webui"), "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        while True:
            try:
                if requests.get(f"{base}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            if process.poll() is not None or time.monotonic() - started > STARTUP_S:
                raise RuntimeError(f"Open WebUI did not start; the end of {log}:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        print(f"Open WebUI {base} answered /health after {time.monotonic() - started:.0f} s", flush=True)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class OpenWebUI:
    """Open WebUI's HTTP API, as its frontend and its API users call it."""

    def __init__(self, base: str) -> None:
        self.base = base
        # With WEBUI_AUTH=false, signin with any body makes (or logs in) admin@localhost.
        signin = requests.post(f"{base}/api/v1/auths/signin", json={"email": "", "password": ""}, timeout=30)
        signin.raise_for_status()
        self.headers = {"Authorization": f"Bearer {signin.json()['token']}"}

    def models(self) -> list[dict[str, Any]]:
        response = requests.get(f"{self.base}/api/models", headers=self.headers, timeout=60)
        response.raise_for_status()
        return list(response.json()["data"])

    def complete(self, messages: list[dict[str, Any]], stream: bool) -> str:
        """`POST /api/chat/completions` as Open WebUI's API docs show it; the answer's content."""
        body = {"model": "orchestrator", "messages": messages, "stream": stream}
        response = requests.post(
            f"{self.base}/api/chat/completions", headers=self.headers, json=body, stream=stream, timeout=120
        )
        response.raise_for_status()
        if not stream:
            return str(response.json()["choices"][0]["message"]["content"])
        content = ""
        for line in response.iter_lines(decode_unicode=True):
            if line and line.startswith("data: ") and line != "data: [DONE]":
                frame = json.loads(line[6:])
                for choice in frame.get("choices") or []:
                    content += (choice.get("delta") or {}).get("content") or ""
        return content

    def chat_turn(self, chat_id: str | None, parent_id: str | None, text: str) -> tuple[str, str, str]:
        """One turn the way the web frontend sends it (`Chat.svelte`); waits for the stored answer.

        Returns (chat id, assistant message id, the answer's content as Open WebUI stored it)."""
        model = next(m for m in self.models() if m["id"] == "orchestrator")
        user_id, answer_id = str(uuid.uuid4()), str(uuid.uuid4())
        user_message = {
            "id": user_id,
            "parentId": parent_id,
            "childrenIds": [],
            "role": "user",
            "content": text,
            "timestamp": int(time.time()),
            "models": ["orchestrator"],
        }
        tasks = {"follow_up_generation": True}
        if chat_id is None:
            tasks.update(title_generation=True, tags_generation=True)
        body: dict[str, Any] = {
            "stream": True,
            "model": "orchestrator",
            "params": {},
            "features": {},
            "variables": {},
            "model_item": model,
            "id": answer_id,
            "parent_id": parent_id,
            "user_message": user_message,
            "background_tasks": tasks,
        }
        if chat_id is not None:
            body["chat_id"] = chat_id
        response = requests.post(f"{self.base}/api/chat/completions", headers=self.headers, json=body, timeout=120)
        response.raise_for_status()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if chat_id is None:
                chats = requests.get(f"{self.base}/api/v1/chats/", headers=self.headers, timeout=30).json()
                chat_id = next((c["id"] for c in chats if self.message(c["id"], answer_id) is not None), None)
            message = self.message(chat_id, answer_id) if chat_id else None
            if message is not None and message.get("done"):
                return chat_id or "", answer_id, str(message.get("content") or "")
            time.sleep(0.3)
        raise RuntimeError(f"Open WebUI stored no finished answer {answer_id} in 60 s")

    def message(self, chat_id: str, message_id: str) -> dict[str, Any] | None:
        chat = requests.get(f"{self.base}/api/v1/chats/{chat_id}", headers=self.headers, timeout=30).json()
        found: dict[str, Any] | None = (
            ((chat.get("chat") or {}).get("history") or {}).get("messages", {}).get(message_id)
        )
        return found


def run_checks(owui: OpenWebUI, ours: Any, check: Check) -> None:
    auth = ours.auth(ours.admin_token)

    def our_sessions() -> list[dict[str, Any]]:
        return list(requests.get(f"{ours.base}/sessions", headers=auth, timeout=30).json()["sessions"])

    def messages(session_id: str) -> list[dict[str, Any]]:
        return list(
            requests.get(f"{ours.base}/sessions/{session_id}/messages", headers=auth, timeout=30).json()["messages"]
        )

    ids = [m["id"] for m in owui.models()]
    check("Open WebUI lists our model", "orchestrator" in ids, f"models: {ids}")

    plain = [{"role": "user", "content": "hello"}]
    check("plain answer, not streamed", owui.complete(plain, False) == "Hello from the orchestrator.")
    check("plain answer, streamed", owui.complete(plain, True) == "Hello from the orchestrator.")

    tool = [{"role": "user", "content": "please remember that I like green tea"}]
    for stream in (False, True):
        content = owui.complete(tool, stream)
        blocks = owui_blocks(content)
        ok = (
            len(blocks) == 1
            and blocks[0]["name"] == "remember"
            and blocks[0]["done"] == "true"
            and blocks[0]["arguments"] == {"command_line": "/remember The user's favourite drink is green tea"}
            and "favourite drink is green tea" in blocks[0]["result"]
            and content.endswith("Got it, I saved that to your memories.")
        )
        check(
            f"tool turn, {'streamed' if stream else 'not streamed'}: the block parses as Open WebUI reads it",
            ok,
            content[:300],
        )

    picture = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is in this picture?"},
                {"type": "image_url", "image_url": {"url": png_data_url()}},
            ],
        }
    ]
    content = owui.complete(picture, False)
    seen = [m for s in our_sessions() for m in messages(s["id"]) if m["content"] == "what is in this picture?"]
    check(
        "an image part reaches us as the turn's image",
        content == "A small red rectangle."
        and len(seen) == 1
        and len((seen[0].get("meta") or {}).get("images") or []) == 1,
        f"{content[:200]} {seen}",
    )

    chat_id, first_id, content = owui.chat_turn(None, None, "please remember that I like green tea")
    check(
        "web chat: Open WebUI stored our tool block intact",
        len(owui_blocks(content)) == 1 and content.endswith("Got it, I saved that to your memories."),
        content[:300],
    )
    chat_id, second_id, content = owui.chat_turn(chat_id, first_id, "how many messages have I sent?")
    check(
        "web chat follow-up: /memory_sql answered",
        len(owui_blocks(content)) == 1
        and owui_blocks(content)[0]["name"] == "memory_sql"
        and "Your messages by role" in content,
        content[:300],
    )
    asked = [
        session_messages
        for session in our_sessions()
        for session_messages in [messages(session["id"])]
        if any(
            m["content"] == "how many messages have I sent?" and not (m.get("meta") or {}).get("imported")
            for m in session_messages
        )
    ]
    imported = [m for m in (asked[0] if len(asked) == 1 else []) if (m.get("meta") or {}).get("imported")]
    check(
        "follow-up history imported without our tool blocks",
        [m["role"] for m in imported] == ["user", "assistant"]
        and "<details" not in imported[1]["content"]
        and imported[1]["content"] == "Got it, I saved that to your memories.",
        json.dumps([m["content"][:80] for m in imported]),
    )

    chat_id, ask_id, content = owui.chat_turn(chat_id, second_id, "give me a quiz")
    check("web chat: a question shows its options", "2. coffee" in content and "Which drink" in content, content[-300:])
    chat_id, bad_id, content = owui.chat_turn(chat_id, ask_id, "lemonade")
    check(
        "web chat: an answer that fits no option is refused with the options",
        "does not fit" in content and "1. green tea" in content,
        content[-300:],
    )
    chat_id, _, content = owui.chat_turn(chat_id, bad_id, "2")
    profile = requests.get(f"{ours.base}/api/profile", headers=auth, timeout=30).json()
    check(
        "web chat: the next message answered the question (profile updated, model went on)",
        profile["fields"].get("favourite_drink", {}).get("value") == "coffee" and "Thanks!" in content,
        f"{profile} {content[-200:]}",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, required=True, help="Open WebUI's virtualenv")
    parser.add_argument("--record", type=Path, help="write what Open WebUI sent to /v1 here (requests.jsonl)")
    args = parser.parse_args()
    check = Check()
    with tempfile.TemporaryDirectory(prefix="openwebui-check-") as tmp_name:
        tmp = Path(tmp_name)
        recorded = tmp / "requests.jsonl"
        env = {"LLM_PROVIDER": "scripted", "SCRIPTED_REPLIES": str(REPLIES), "RATE_LIMITS": "turns=off,sessions=off"}
        with running_server(tmp / "orchestrator", env) as ours:
            proxy_port = free_port()
            proxy = serve(proxy_port, ours.base, recorded)
            owui_dir = tmp / "open-webui"
            owui_dir.mkdir()
            try:
                with open_webui(
                    args.venv, f"http://127.0.0.1:{proxy_port}/v1", ours.admin_token, owui_dir, tmp / "open-webui.log"
                ) as base:
                    run_checks(OpenWebUI(base), ours, check)
            finally:
                proxy.shutdown()
            if check.failures:
                print(f"--- the end of our server log\n{ours.log()[-3000:]}")
        sent = [json.loads(line) for line in recorded.read_text().splitlines()] if recorded.exists() else []
        print(
            f"Open WebUI sent {len(sent)} requests to /v1: "
            + ", ".join(sorted({f"{r['method']} {r['path']}" for r in sent}))
        )
        if args.record:
            args.record.mkdir(parents=True, exist_ok=True)
            (args.record / "requests.jsonl").write_text(recorded.read_text() if recorded.exists() else "")
    print("PASS" if check.failures == 0 else f"FAIL ({check.failures} checks failed)")
    return 0 if check.failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
