"""How fast the web UI is in a real browser (issue 26, Speed): Debian's chromium via Playwright.

The real server (`python app.py`) runs against the loopback fake model
(`testing/fake_llm.py`); the page is measured with the marks it sets itself
(`performance.mark` in static/js/login.js and history.js):

  a. first render: navigation start -> `chat-usable` (the conversations are listed, the
     newest chat is open and drawn, the message box has the focus and takes text). Cold: a
     fresh browser profile (every file downloaded); warm: a reload (every file revalidated,
     304). Also the first contentful paint and the bytes the page downloaded.
  b. opening a chat of 200 messages (Markdown, code blocks, tables, tool blocks) from the
     conversations list: the click -> `messages-shown` (its newest page fetched, drawn and laid
     out). And drawing all 200 at once (every message through `messageNode`, then layout), which
     is what "Load older messages" three times adds up to.
  c. long tasks (PerformanceObserver `longtask`, over 50 ms) on the page while a long answer
     (paragraphs, code blocks, a table; about 4,000 characters) streams at 50 tokens/s (a
     piece of 4 characters every 20 ms), and how many times the answer was redrawn.

Targets: first render under 300 ms, the 200-message chat open under 200 ms, no long task
over 50 ms while tokens stream. Medians of `--runs` runs. Figures: bench/README.md.

    .venv/bin/python bench/ui.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import start_server, stop_server  # noqa: E402
from testing.fake_llm import FakeLLMServer, StreamReply  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 800}
LONG_TASKS = """
window.__longtasks = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.__longtasks.push(entry.duration);
}).observe({ type: "longtask", buffered: true });
"""

CODE = """```python
def mean(values):
    total = 0
    for value in values:
        total += value
    return total / len(values)


print(mean([1, 2, 3, 4]))
```"""
TABLE = "| language | typing | year |\n|---|---|---:|\n" + "\n".join(
    f"| lang{i} | {'static' if i % 2 else 'dynamic'} | {1990 + i} |" for i in range(8)
)
PARAGRAPH = (
    "A **mean** adds the values and divides by how many there are; the *median* sorts them and "
    "takes the middle one, which an outlier cannot drag. See [the notes](https://example.org/notes) "
    "and `statistics.median` for the details."
)


def reply_for(turn: int) -> list[str]:
    """The fake model's replies for one turn: a tool block every third turn."""
    kind = turn % 4
    if kind == 0:
        return [f"{PARAGRAPH}\n\n{CODE}\n\nTurn {turn}."]
    if kind == 1:
        return [f"Here is a table (turn {turn}):\n\n{TABLE}\n\n{PARAGRAPH}"]
    if kind == 2:
        return ["/list_files", f"Nothing there yet (turn {turn}). {PARAGRAPH}"]
    return [f"- one\n- two\n- three\n\n{PARAGRAPH}\n\n> a quote, turn {turn}"]


def long_answer() -> str:
    parts = []
    for i in range(5):
        parts += [f"## Part {i + 1}", PARAGRAPH, CODE, PARAGRAPH]
        if i % 2 == 0:
            parts.append(TABLE)
    return "\n\n".join(parts)


def api(base: str, token: str, method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        base + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def build_chats(base: str, token: str, llm: FakeLLMServer, messages: int) -> tuple[str, str]:
    """A chat of `messages` messages, then a short one (the newest, which the page opens)."""
    big = api(base, token, "POST", "/sessions", {"name": "200 messages"})["id"]
    turn = 0
    while True:
        stored = api(base, token, "GET", f"/sessions/{big}/messages?limit=200")
        if len(stored["messages"]) >= messages or turn > messages:
            break
        llm.queue(*reply_for(turn))
        api(base, token, "POST", "/chat", {"message": f"question {turn}: how do I compute a mean?", "session_id": big})
        turn += 1
    small = api(base, token, "POST", "/sessions", {"name": "short chat"})["id"]
    llm.queue("Hello! How can I help?")
    api(base, token, "POST", "/chat", {"message": "hello", "session_id": small})
    return big, small


def wait_mark(page: Any, name: str, after: float = 0.0, timeout_s: float = 90) -> float:
    """The start time of the newest `name` mark later than `after` (polled: the page's CSP
    forbids the string evaluation `wait_for_function` needs)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = page.evaluate(
            "([name, after]) => performance.getEntriesByName(name).map((e) => e.startTime).filter((t) => t > after)",
            [name, after],
        )
        if found:
            return float(max(found))
        time.sleep(0.01)
    state = page.evaluate(
        "() => ({ login: !document.getElementById('login-view').hidden,"
        " busy: document.getElementById('app-view').getAttribute('aria-busy'),"
        " error: document.getElementById('login-error').textContent, url: location.href })"
    )
    raise SystemExit(f"the page never set the mark {name!r}: {state}")


def wait_detail(page: Any, name: str) -> dict[str, Any]:
    wait_mark(page, name)
    detail: dict[str, Any] = page.evaluate("(name) => performance.getEntriesByName(name).at(-1).detail", name)
    return detail


def signed_in_context(browser: Any, base: str, token: str) -> Any:
    context = browser.new_context(viewport=VIEWPORT)
    answer = context.request.post(base + "/api/login", data={"token": token})
    if not answer.ok:
        raise SystemExit(f"sign-in failed: {answer.status} {answer.text()}")
    return context


def first_render(browser: Any, base: str, token: str, runs: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"cold": [], "warm": [], "fcp_cold": [], "kb_cold": [], "kb_warm": []}
    for _ in range(runs):
        context = signed_in_context(browser, base, token)
        page = context.new_page()
        page.goto(base + "/")
        figures["cold"].append(wait_mark(page, "chat-usable"))
        figures["fcp_cold"].append(
            page.evaluate("performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? NaN")
        )
        figures["kb_cold"].append(page.evaluate(TRANSFERRED) / 1024)
        if os.environ.get("UI_BENCH_TIMELINE"):
            print(page.evaluate(TIMELINE), file=sys.stderr)
        page.reload()
        figures["warm"].append(wait_mark(page, "chat-usable"))
        figures["kb_warm"].append(page.evaluate(TRANSFERRED) / 1024)
        context.close()
    return figures


# UI_BENCH_TIMELINE=1: each cold load's requests (start and end, ms) and marks, to see where a
# first render goes.
TIMELINE = """
[...performance.getEntriesByType('resource').map((e) => `${e.startTime.toFixed(0)}-${e.responseEnd.toFixed(0)} ${new URL(e.name).pathname}`),
 ...performance.getEntriesByType('mark').map((e) => `${e.startTime.toFixed(0)} mark ${e.name}`),
 `${performance.getEntriesByType('navigation')[0].responseEnd.toFixed(0)} page`].join('\\n')
"""

TRANSFERRED = """
[performance.getEntriesByType('navigation')[0], ...performance.getEntriesByType('resource')]
  .reduce((sum, e) => sum + (e.transferSize || 0), 0)
"""


def open_big_chat(browser: Any, base: str, token: str, big: str, small: str, runs: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"open": [], "shown": [], "all": []}
    context = signed_in_context(browser, base, token)
    page = context.new_page()
    page.goto(base + "/")
    wait_mark(page, "chat-usable")
    for _ in range(runs):
        for target in (small, big):
            clicked = page.evaluate(
                """(id) => {
                    const button = document.querySelector(`[data-session-id="${id}"] .session-open`);
                    const t = performance.now();
                    button.click();
                    return t;
                }""",
                target,
            )
            shown = wait_mark(page, "messages-shown", after=clicked)
            page.wait_for_selector("#app-view[aria-busy='false']")
            if target == big:
                figures["open"].append(shown - clicked)
                figures["shown"].append(page.evaluate("document.querySelectorAll('#message-list > .message').length"))
        figures["all"].append(page.evaluate(DRAW_ALL, big))
    context.close()
    return figures


DRAW_ALL = """async (id) => {
  const { messageNode, visibleMessages } = await import("/static/js/messages.js");
  let before = "", all = [];
  for (;;) {
    const page = await (await fetch(`/sessions/${id}/messages?limit=200${before}`)).json();
    all = [...page.messages, ...all];
    if (!page.has_more || !page.messages.length) break;
    before = `&before=${page.messages[0].id}`;
  }
  const list = document.getElementById("message-list");
  const start = performance.now();
  const nodes = visibleMessages(all).map((m) => messageNode(m));
  list.replaceChildren(...nodes);
  void document.getElementById("messages").scrollHeight; // layout
  return performance.now() - start;
}"""


def stream_long_answer(browser: Any, base: str, token: str, llm: FakeLLMServer, runs: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {
        "longest": [],
        "count": [],
        "renders": [],
        "pieces": [],
        "slowest": [],
        "parsed": [],
    }
    text = long_answer()
    pieces = tuple(text[i : i + 4] for i in range(0, len(text), 4))
    for _ in range(runs):
        context = signed_in_context(browser, base, token)
        context.add_init_script(LONG_TASKS)
        page = context.new_page()
        page.goto(base + "/")
        wait_mark(page, "chat-usable")
        page.click("#new-session")
        page.wait_for_selector("#app-view[aria-busy='false']")
        time.sleep(0.5)  # let the page settle: only the streaming is measured
        page.evaluate("window.__longtasks = []")
        llm.queue(StreamReply(pieces=pieces, delay_s=0.02))
        page.fill("#composer-input", "explain means and medians at length")
        page.press("#composer-input", "Enter")
        page.wait_for_selector(".role-assistant:has-text('Part 5')", timeout=120_000)
        tasks = page.evaluate("window.__longtasks")
        figures["longest"].append(max(tasks, default=0.0))
        figures["count"].append(len(tasks))
        drawn = wait_detail(page, "answer-drawn")
        figures["renders"].append(drawn["renders"])
        figures["pieces"].append(drawn["deltas"])
        figures["slowest"].append(drawn["slowest"])
        figures["parsed"].append(drawn["parsed"] / drawn["chars"])
        context.close()
    return figures


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--stream-runs", type=int, default=3)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())

    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer() as llm:
        # every run signs in again: no login limit (nor the others, which start_server lifts)
        limits = {"RATE_LIMITS": "turns=off,sessions=off,runs=off,generate=off,login=off"}
        server, port = start_server(tmp, str(Path(tmp) / "app.db"), llm.openai_base_url, limits)
        base = f"http://127.0.0.1:{port}"
        try:
            token = (Path(tmp) / "admin.token").read_text().strip()
            big, small = build_chats(base, token, llm, args.messages)
            count = len(api(base, token, "GET", f"/sessions/{big}/messages?limit=200")["messages"])
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                first = first_render(browser, base, token, args.runs)
                opened = open_big_chat(browser, base, token, big, small, args.runs)
                streamed = stream_long_answer(browser, base, token, llm, args.stream_runs)
                browser.close()
        finally:
            stop_server(server)

    print(f"load average before/after: {load_before} / {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"a. first render (navigation start -> chat usable), median of {args.runs}:")
    print(
        f"   cold profile {median(first['cold']):6.1f} ms  (first contentful paint {median(first['fcp_cold']):.1f} ms,"
        f" {median(first['kb_cold']):.0f} KiB transferred)"
    )
    print(f"   reload       {median(first['warm']):6.1f} ms  ({median(first['kb_warm']):.0f} KiB transferred)")
    print(f"b. a chat of {count} stored messages, median of {args.runs}:")
    print(
        f"   open (click -> newest page drawn, {median(opened['shown']):.0f} messages) {median(opened['open']):6.1f} ms"
    )
    print(f"   all {count} drawn at once (messageNode + layout)        {median(opened['all']):6.1f} ms")
    print(f"c. a {len(long_answer())}-character answer at 50 tokens/s, {args.stream_runs} runs:")
    print(
        f"   longest long task {max(streamed['longest']):.0f} ms (medians: longest {median(streamed['longest']):.0f} ms,"
        f" {median(streamed['count']):.0f} long tasks); answer redrawn {median(streamed['renders']):.0f} times"
        f" for {median(streamed['pieces']):.0f} deltas"
    )
    print(
        f"   the slowest redraw {median(streamed['slowest']):.1f} ms (median of the runs); Markdown parsed"
        f" {median(streamed['parsed']):.1f} times the answer's length, all frames together"
    )


if __name__ == "__main__":
    main()
