"""The Code and Problems panels in a real browser (issue 12 part 6): the code panel's
sample follows the chosen language, and generating a practice activity shows its progress
and its failures.

Everything here is the real server; nothing is answered at the browser's network layer.
Two servers: the module's `server` has no judge (JUDGE_ENABLED=0), so `POST
/activities/generate` answers 503 `judge_unavailable`, and after the hour's budget 429
`rate_limited`. `judge_server` runs the real Docker judge (marked `docker`: skipped without
an engine, failed when JUDGE_REQUIRED=1 as in CI); its generations draft problems with the
loopback fake model (queued replies, the order of `activities/generate.py`'s prompts: one
per draft), verify them in real containers and stream their real progress, and its Stop
cancels the job through `POST /sessions/<id>/cancel`.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests

from testing.fake_llm import FakeLLMServer, StreamReply
from tests.api.test_judge_api import STARTER, SUM_SOLUTION, draft
from tests.ui_support import TIMEOUT_MS, rest, shot

pytestmark = [pytest.mark.browser]

SAMPLE_MARKS = {
    "python": 'print(f"Hello, {name}!")',
    "javascript": "console.log(`Hello, ${input",
    "c": "#include <stdio.h>",
    "cpp": 'std::cout << "Hello, "',
    "java": "public class Main",
    "sql": "SELECT 'Hello, ' || name",
}
ENTRY_FILES = {
    "python": "main.py",
    "javascript": "main.js",
    "c": "main.c",
    "cpp": "main.cpp",
    "java": "Main.java",
    "sql": "query.sql",
}


def open_panel(ui: Any, which: str) -> None:
    ui.click(f"#{which}-toggle")
    ui.wait_for_selector(f"#{which}-panel:not([hidden])")


def test_code_panel_sample_follows_the_language(ui: Any) -> None:
    open_panel(ui, "code")
    code = ui.locator("#run-code")
    assert SAMPLE_MARKS["python"] in code.input_value()
    assert ui.locator("#run-sample").is_hidden()
    seen = {}
    for language in ["javascript", "c", "cpp", "java", "sql", "python"]:
        ui.select_option("#run-language", language)
        seen[language] = code.input_value()
        assert SAMPLE_MARKS[language] in seen[language], language
        assert ui.locator("#run-file").inner_text() == ENTRY_FILES[language]
    assert len(set(seen.values())) == 6  # one sample per language
    shot(ui, "68-code-sample-python")

    # the user's own code is never replaced by a language change; the sample is one click away
    code.fill("print('mine')")
    ui.select_option("#run-language", "java")
    assert code.input_value() == "print('mine')"
    sample = ui.get_by_role("button", name="Use the sample for this language")
    assert sample.is_visible()
    sample.focus()
    ui.keyboard.press("Enter")
    assert SAMPLE_MARKS["java"] in code.input_value()
    assert ui.evaluate("document.activeElement.id") == "run-code"
    assert ui.locator("#run-sample").is_hidden()
    shot(ui, "69-code-sample-java")


def generate(ui: Any, topic: str, language: str = "python", count: str = "2") -> None:
    open_panel(ui, "problems")
    assert ui.evaluate("document.activeElement.id") == "generate-topic"
    ui.fill("#generate-topic", topic)
    ui.select_option("#generate-language", language)
    ui.fill("#generate-count", count)
    ui.press("#generate-topic", "Enter")


def test_generation_without_a_judge_says_why(ui: Any) -> None:
    generate(ui, "loops over lists")
    status = ui.locator("#generate-status.notice-error")
    status.wait_for()
    text = status.inner_text()
    assert "Problems cannot be generated here: the code judge is unavailable (judge_unavailable)." in text
    assert ui.locator("#generate-button").is_enabled()
    assert ui.locator("#generate-steps li").count() == 0
    assert ui.get_attribute("#generate-status", "role") == "status"
    shot(ui, "70-generate-judge-unavailable")


def test_generation_over_the_rate_limit_says_when_to_retry(ui: Any, server: dict[str, str]) -> None:
    headers = {"Authorization": f"Bearer {server['token']}"}
    body = {"topic": "spend the budget", "language": "python"}
    for _ in range(20):  # the default budget is 5 an hour; refusals without a judge count too
        response = requests.post(server["base"] + "/activities/generate", json=body, headers=headers, timeout=5)
        if response.status_code == 429:
            break
        assert response.json()["error"]["code"] == "judge_unavailable"
    assert response.status_code == 429, "the generate budget was never used up"
    wait = response.json()["error"]["details"]["retry_after_s"]
    generate(ui, "recursion")
    status = ui.locator("#generate-status.notice-error")
    status.wait_for()
    assert "as many activities as allowed for now (rate_limited)" in status.inner_text()
    assert "Try again in " in status.inner_text() and wait > 0
    shot(ui, "71-generate-rate-limited")


# generations against the real judge ----------------------------------------------------------

GENERATION_MS = 90_000  # a generation verifies each draft in fresh containers on shared cores
TITLE = "Sum of <b>integers</b>"  # markup in a model's title is text on the page


def generated_activity(server: dict[str, str], topic: str) -> dict[str, Any]:
    """The stored activity of the generation about `topic` (with its learner-view problems)."""
    found = [a for a in rest(server, "GET", "/activities")["activities"] if a["topic"] == topic]
    assert len(found) == 1, found
    activity: dict[str, Any] = rest(server, "GET", f"/activities/{found[0]['id']}")
    return activity


def step_texts(ui: Any) -> list[str]:
    """Each problem's line, without the list of its rejected drafts."""
    return list(ui.locator("#generate-steps > li > .step-text").all_inner_texts())


def rejection_texts(ui: Any) -> list[str]:
    """Every rejected draft's line, in order, under the problems they belong to."""
    return list(ui.locator("#generate-steps .step-rejections li").all_inner_texts())


@pytest.mark.docker
def test_generation_shows_a_rejected_draft_then_loads_the_verified_problem(
    judge_ui: Any, judge_server: dict[str, str], llm: FakeLLMServer
) -> None:
    # draft 1 is valid JSON whose reference solution fails its own tests in the judge; draft 2 passes
    llm.queue(draft(reference_solution="print(1)"), "```json\n" + draft(title=TITLE) + "\n```")
    generate(judge_ui, "sums of integers", language="python", count="1")
    judge_ui.locator("#generate-status:has-text('All 1 problem(s) are ready.')").wait_for(timeout=GENERATION_MS)
    assert step_texts(judge_ui) == [f"Problem 1: ready: {TITLE}"]
    assert rejection_texts(judge_ui) == [
        "Draft 1 rejected: the reference solution failed its own tests (reference_failed)"
    ]
    assert judge_ui.get_attribute("#generate-steps > li", "data-state") == "stored"
    assert judge_ui.locator("#generate-steps b").count() == 0
    assert judge_ui.evaluate(
        "[document.querySelector('#generate-meter').value, document.querySelector('#generate-meter').max]"
    ) == [1, 1]
    assert judge_ui.locator("#generate-stop").is_hidden() and judge_ui.locator("#generate-button").is_enabled()
    problem = judge_ui.locator("#problem-list .problem")
    problem.wait_for()
    assert problem.locator("h3").inner_text() == TITLE
    shot(judge_ui, "72-generate-progress")

    # the server asked twice, the second time saying why the first draft was refused
    assert len(llm.requests) == 2
    assert "the reference solution fails its own tests" in llm.requests[1]["messages"][-1]["content"]
    activity = generated_activity(judge_server, "sums of integers")
    assert (activity["language"], activity["requested"], activity["difficulty"], activity["status"]) == (
        "python",
        1,
        "easy",
        "ready",
    )
    assert [p["title"] for p in activity["problems"]] == [TITLE]
    starter = activity["problems"][0]["starter_files"]["main.py"]
    assert starter == STARTER  # the starter file exactly as drafted (its final newline kept)
    assert judge_ui.locator("#problem-list textarea").input_value() == starter
    assert SUM_SOLUTION not in judge_ui.content()  # the reference solution never reaches the page


@pytest.mark.docker
def test_a_generation_whose_drafts_all_fail_says_so(
    judge_ui: Any, judge_server: dict[str, str], llm: FakeLLMServer
) -> None:
    llm.queue("here is your problem!", draft(reference_solution="print(1)"), draft(starter_code=SUM_SOLUTION))
    generate(judge_ui, "pointless sums", language="python", count="1")
    judge_ui.locator("#generate-status.notice-error").wait_for(timeout=GENERATION_MS)
    assert judge_ui.locator("#generate-status").inner_text() == (
        "No problem was generated (every draft was rejected; try another topic or try again)."
    )
    assert step_texts(judge_ui) == [
        "Problem 1: failed after 3 drafts (last: the starter code already passed every test)"
    ]
    assert rejection_texts(judge_ui) == [
        "Draft 1 rejected: the model's draft was not valid JSON (invalid_json)",
        "Draft 2 rejected: the reference solution failed its own tests (reference_failed)",
        "Draft 3 rejected: the starter code already passed every test (starter_passes)",
    ]
    assert judge_ui.get_attribute("#generate-steps > li", "data-state") == "failed"
    assert judge_ui.locator("#generate-button").is_enabled() and judge_ui.locator("#generate-stop").is_hidden()
    assert judge_ui.locator("#problem-list .problem").count() == 0
    assert len(llm.requests) == 3
    activity = generated_activity(judge_server, "pointless sums")
    assert activity["status"] == "failed" and activity["problems"] == []
    listed = judge_ui.locator("#activity-list button", has_text="pointless sums")
    listed.wait_for(timeout=GENERATION_MS)  # the failed activity is listed without reopening the panel
    assert "failed" in listed.inner_text()
    shot(judge_ui, "73-generate-all-failed")


def wait_for_requests(llm: FakeLLMServer, count: int) -> None:
    """Block until the fake model has received `count` requests (polled: the draft is in flight)."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while len(llm.requests) < count:
        assert time.monotonic() < deadline, f"the model got {len(llm.requests)} request(s), not {count}"
        time.sleep(0.02)


@pytest.mark.docker
def test_stop_during_a_generation_stops_it_and_says_so(
    judge_ui: Any, judge_server: dict[str, str], llm: FakeLLMServer
) -> None:
    # the model starts its draft and never finishes it: only Stop can end this generation
    llm.queue(StreamReply(pieces=('{"title": "Sum',), hang=True))
    generate(judge_ui, "a never-ending draft", language="python", count="1")
    judge_ui.locator("#generate-steps > li[data-state='running']").wait_for()
    wait_for_requests(llm, 1)
    stop = judge_ui.locator("#generate-stop")
    assert stop.is_visible() and judge_ui.locator("#generate-button").is_disabled()
    stop.click()
    judge_ui.locator("#generate-status.notice-error").wait_for()
    assert judge_ui.locator("#generate-status").inner_text() == "No problem was generated (you stopped it)."
    assert step_texts(judge_ui) == ["Problem 1: stopped before a draft was kept"]
    assert judge_ui.get_attribute("#generate-steps > li", "data-state") == "stopped"
    assert stop.is_hidden() and judge_ui.locator("#generate-button").is_enabled()
    shot(judge_ui, "74-generate-stopped")

    # server side: the model's stream was closed, the turn is over and the activity failed
    assert llm.answer(0).client_hung_up
    assert len(llm.requests) == 1  # no further draft after Stop
    activity = generated_activity(judge_server, "a never-ending draft")
    assert activity["status"] == "failed" and activity["problems"] == []
    assert rest(judge_server, "GET", f"/sessions/{activity['session_id']}")["active_turn"] is None


@pytest.mark.docker
def test_stop_after_a_stored_problem_keeps_it(judge_ui: Any, judge_server: dict[str, str], llm: FakeLLMServer) -> None:
    # problem 1 is verified and stored; the draft of problem 2 never finishes until Stop
    llm.queue(draft(), StreamReply(pieces=('{"title": "Product',), hang=True))
    generate(judge_ui, "stop halfway", language="python", count="2")
    judge_ui.locator("#generate-steps > li[data-index='1'][data-state='running']").wait_for(timeout=GENERATION_MS)
    wait_for_requests(llm, 2)
    judge_ui.click("#generate-stop")
    judge_ui.locator("#generate-status:has-text('before you stopped it')").wait_for()
    assert judge_ui.locator("#generate-status").inner_text() == "1 of 2 problem(s) generated before you stopped it."
    assert step_texts(judge_ui) == ["Problem 1: ready: Sum of integers", "Problem 2: stopped before a draft was kept"]
    judge_ui.locator("#problem-list .problem").wait_for()  # what was stored before Stop is loaded
    assert judge_ui.locator("#problem-list .problem h3").all_inner_texts() == ["Sum of integers"]
    shot(judge_ui, "75-generate-stopped-halfway")

    assert "Do not repeat these problems: Sum of integers" in llm.requests[1]["messages"][-1]["content"]
    assert llm.answer(1).client_hung_up and len(llm.requests) == 2
    activity = generated_activity(judge_server, "stop halfway")
    assert activity["status"] == "partial" and [p["title"] for p in activity["problems"]] == ["Sum of integers"]
