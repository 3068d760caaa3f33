"""The Code and Problems panels in a real browser (issue 12 part 6): the code panel's
sample follows the chosen language, and generating a practice activity shows its progress
and its failures.

The failures are the real server's: this server has no judge (JUDGE_ENABLED=0), so
`POST /activities/generate` answers 503 `judge_unavailable`, and after the hour's budget
429 `rate_limited`. A generation that runs needs the Docker judge, which these browser
tests do not have; the progress test therefore answers the two requests of a generation
(`POST /activities/generate`, then its `/generate/stream`) at the browser's network layer
with the documented shapes (SPEC 9, `api/judge.py`, `activities/generate.py`), so what is
tested is the page's reading of that contract, not the job itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from tests.ui_support import shot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore::pytest.PytestRemovedIn10Warning"),
]

SAMPLE_MARKS = {
    "python": 'print(f"Hello, {name}!")',
    "javascript": "console.log(`Hello, ${input",
    "c": "#include <stdio.h>",
    "cpp": "std::cout << \"Hello, \"",
    "java": "public class Main",
    "sql": "SELECT 'Hello, ' || name",
}
ENTRY_FILES = {"python": "main.py", "javascript": "main.js", "c": "main.c", "cpp": "main.cpp", "java": "Main.java",
               "sql": "query.sql"}


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


def sse(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(f"id: {index}\nevent: {name}\ndata: {json.dumps(data)}\n\n" for index, (name, data) in enumerate(events, 1))


def test_generation_progress_shows_each_problem_and_loads_the_activity(ui: Any) -> None:
    job = {"activity_id": "act1", "session_id": "s-gen", "status": "generating", "turn_id": "t-gen",
           "stream": "/sessions/s-gen/generate/stream"}
    turn = {"turn_id": "t-gen"}
    events = [
        ("turn.started", turn),
        ("job.started", {**turn, "activity_id": "act1", "count": 2, "language": "python"}),
        ("problem.started", {**turn, "index": 0, "attempt": 1}),
        ("problem.stored", {**turn, "index": 0, "problem_id": "p1", "title": "Sum <two> numbers"}),
        ("problem.started", {**turn, "index": 1, "attempt": 1}),
        ("problem.rejected", {**turn, "index": 1, "attempt": 1, "code": "reference_failed"}),
        ("problem.started", {**turn, "index": 1, "attempt": 2}),
        ("problem.rejected", {**turn, "index": 1, "attempt": 2, "code": "invalid_json"}),
        ("problem.failed", {**turn, "index": 1, "attempts": 3}),
        ("done", {**turn, "activity_id": "act1", "status": "partial", "problems": [{"id": "p1", "title": "Sum <two> numbers"}],
                  "stopped": False}),
    ]
    activity = {"id": "act1", "topic": "sums", "language": "python", "status": "partial", "problems": [
        {"id": "p1", "activity_id": "act1", "language": "python", "difficulty": "easy", "title": "Sum <two> numbers",
         "statement": "Read two numbers, print their sum.", "starter_files": {"main.py": "# your code\n"},
         "position": 0, "created_at": "2026-01-01T00:00:00.000Z"}]}
    posted: list[dict[str, Any]] = []

    def answer_generate(route: Any) -> None:
        posted.append(route.request.post_data_json)
        route.fulfill(status=202, content_type="application/json", body=json.dumps(job))

    ui.route("**/activities/generate", answer_generate)
    ui.route("**/sessions/s-gen/generate/stream*",
             lambda route: route.fulfill(status=200, content_type="text/event-stream", body=sse(events)))
    ui.route("**/activities/act1", lambda route: route.fulfill(status=200, content_type="application/json",
                                                                 body=json.dumps(activity)))
    generate(ui, "sums", language="python", count="2")
    status = ui.locator("#generate-status")
    ui.locator("#generate-status:has-text('1 of 2 problem(s) generated')").wait_for()
    assert posted == [{"topic": "sums", "language": "python", "count": 2, "difficulty": "easy"}]
    assert status.inner_text() == "1 of 2 problem(s) generated; the others failed."
    steps = ui.locator("#generate-steps li")
    assert steps.all_inner_texts() == ["Problem 1: ready: Sum <two> numbers", "Problem 2: failed after 3 drafts (last: the model's draft was not valid JSON)"]
    assert [steps.nth(i).get_attribute("data-state") for i in range(2)] == ["stored", "failed"]
    assert ui.locator("#generate-steps b, #generate-steps two").count() == 0
    assert ui.evaluate("document.querySelector('#generate-meter').value") == 2
    assert ui.locator("#generate-stop").is_hidden() and ui.locator("#generate-button").is_enabled()
    problem = ui.locator("#problem-list .problem")
    problem.wait_for()
    assert problem.locator("h3").inner_text() == "Sum <two> numbers"
    assert ui.locator("#problem-list textarea").input_value() == "# your code\n"
    shot(ui, "72-generate-progress")


def test_a_generation_whose_drafts_all_fail_says_so(ui: Any) -> None:
    job = {"activity_id": "act2", "session_id": "s-bad", "status": "generating", "turn_id": "t-bad",
           "stream": "/sessions/s-bad/generate/stream"}
    turn = {"turn_id": "t-bad"}
    events = [
        ("job.started", {**turn, "activity_id": "act2", "count": 1, "language": "c"}),
        ("problem.started", {**turn, "index": 0, "attempt": 1}),
        ("problem.rejected", {**turn, "index": 0, "attempt": 1, "code": "provider_unavailable"}),
        ("problem.failed", {**turn, "index": 0, "attempts": 3}),
        ("done", {**turn, "activity_id": "act2", "status": "failed", "problems": [], "stopped": False}),
    ]
    ui.route("**/activities/generate", lambda route: route.fulfill(status=202, content_type="application/json",
                                                                   body=json.dumps(job)))
    ui.route("**/sessions/s-bad/generate/stream*",
             lambda route: route.fulfill(status=200, content_type="text/event-stream", body=sse(events)))
    generate(ui, "pointers", language="c", count="1")
    ui.locator("#generate-status.notice-error").wait_for()
    assert ui.locator("#generate-status").inner_text() == (
        "No problem was generated (every draft was rejected; try another topic or try again).")
    assert ui.locator("#generate-steps li").inner_text() == "Problem 1: failed after 3 drafts (last: the model did not answer)"
    assert ui.locator("#problem-list .problem").count() == 0
    shot(ui, "73-generate-all-failed")
