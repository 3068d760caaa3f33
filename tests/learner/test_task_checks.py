"""Grading by criterion type: sql_result on SQLite (read-only, bounded), text_match regexes,
code_test in the judge (a stub for the error paths, the real Docker judge when present),
and the shipped example's reference answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from bounded.pool import WorkerPool
from judge.models import TestResult, Verdict
from learner.checks import JudgeUnavailable, check_sql, check_text, run_checks, run_select
from learner.importer import read_task_file
from learner.spec import SqlResultCriterion, TextMatchCriterion
from testing.attacks.sql import GROWING_CTE, SLOW_CALL, TASK_BIG_BLOBS
from tests.judge_support import require_judge
from tests.task_support import SQL_ANSWER, SQL_SETUP, SUM_PROGRAM, Classroom

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "intro_python.yaml"
DOGS = SqlResultCriterion(
    type="sql_result",
    id="c1",
    description="dogs",
    setup_sql=SQL_SETUP,
    expected_columns=["name"],
    expected_rows=[["Rex"], ["Fido"]],
)


@pytest.mark.parametrize(
    "query, passed, message",
    [
        (SQL_ANSWER, True, "passed"),
        ("SELECT name FROM pets WHERE kind = 'dog' ORDER BY name;", True, "passed"),  # order free, one trailing ;
        ("select NAME from pets where kind like '%og'", True, "passed"),
        ("SELECT name FROM pets", False, "3 rows returned, 2 expected"),
        ("SELECT kind FROM pets WHERE kind = 'dog'", False, "wrong columns"),
        ("SELECT nam FROM pets", False, "no such column"),
        ("DELETE FROM pets", False, "only a read-only SELECT"),
        ("ATTACH DATABASE '/tmp/x.db' AS x", False, "only a read-only SELECT"),
        ("PRAGMA table_info(pets)", False, "only a read-only SELECT"),
        ("SELECT 1; SELECT 2", False, "exactly one SELECT"),
        (
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n",
            False,
            "longer than",
        ),
        ("SELECT zeroblob(100000000)", False, "too big"),
    ],
)
def test_sql_result(query, passed, message):
    ok, text = check_sql(DOGS, query, timeout_s=0.3)
    assert ok is passed and message in text, text


@pytest.mark.parametrize(
    "query, message",
    [
        (GROWING_CTE, "more memory than allowed"),  # inside the engine: UNION's dedupe index
        (TASK_BIG_BLOBS, "larger than 1 MB"),  # each value allowed, the whole result not
        (
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 30) SELECT "
            + ", ".join(f"zeroblob(999000) AS b{i}" for i in range(20))
            + " FROM r",
            "more memory than allowed",
        ),
        ("SELECT " + ", ".join(f"name AS c{i}" for i in range(65)) + " FROM pets", "too many columns"),
    ],
)
def test_sql_result_is_bounded_inside_the_engine(query, message):
    ok, text = check_sql(DOGS, query, timeout_s=1.0)
    assert not ok and message in text, text


def test_sql_result_slow_function_call_is_stopped_at_the_deadline():
    ok, text = check_sql(DOGS, SLOW_CALL, timeout_s=0.5)
    assert not ok and "longer than 0.5 s" in text  # ended by the deadline's kill, which says so


def test_sql_result_runs_in_the_given_pool_and_a_broken_setup_is_no_attempt():
    with WorkerPool() as pool:
        results = run_checks([DOGS], SQL_ANSWER, None, lambda cap: cap, pool=pool)
        assert results[0].passed and len(pool.worker_pids()) == 1
        broken = DOGS.model_copy(update={"setup_sql": "CREATE TABLE pets ("})
        with pytest.raises(JudgeUnavailable, match="SQL checker is unavailable"):
            run_checks([broken], SQL_ANSWER, None, lambda cap: cap, pool=pool)


def test_the_submit_tool_grades_sql_in_the_apps_warm_workers(tmp_path):
    """`submit` passes the app's pool (`ctx.bounded`) down to the checks: no one-off worker per call."""
    from dataclasses import replace

    from tests.task_support import TOOLS
    from tools.runner import run_tool

    room = Classroom(tmp_path)
    room.close_task("basics", "yes")
    room.ok("start_task", task_id="sql_query")
    with WorkerPool() as pool:
        ctx = replace(room.ctx(room.alice), judge=None, bounded=pool)
        wrong = run_tool(TOOLS["submit"], {"task_id": "sql_query", "answer": "SELECT name FROM pets"}, ctx)
        assert wrong.ok and wrong.output["result"] == "failed"
        pids = pool.worker_pids()
        right = run_tool(TOOLS["submit"], {"task_id": "sql_query", "answer": SQL_ANSWER}, ctx)
        assert right.ok and right.output["result"] == "passed"
        assert len(pids) == 1 and pool.worker_pids() == pids  # the same warm worker graded both


def test_sql_result_row_cap():
    assert (
        "more than 1000 rows"
        in run_select(
            "", "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n LIMIT 5000) SELECT x FROM n", 2
        )["error"]
    )


@pytest.mark.parametrize(
    "pattern, mode, ignore_case, answer, passed",
    [
        ("yes", "fullmatch", True, "YES", True),
        ("yes", "fullmatch", False, "YES", False),
        ("yes", "fullmatch", True, "yes please", False),
        (r"O\(\s*1\s*\)", "search", False, "it is O( 1 ) on average", True),
        (r"\bdef\s+largest\s*\(", "search", False, "largest = max", False),
    ],
)
def test_text_match(pattern, mode, ignore_case, answer, passed):
    criterion = TextMatchCriterion(
        type="text_match", id="c1", description="d", pattern=pattern, mode=mode, ignore_case=ignore_case
    )
    assert check_text(criterion, answer, 1.0)[0] is passed


def test_text_match_has_a_time_bound():
    criterion = TextMatchCriterion(type="text_match", id="c1", description="d", pattern=r"(a|aa)+$")
    ok, message = check_text(criterion, "a" * 40 + "!", 0.05)
    assert not ok and "too long" in message


# code_test with a stand-in judge -----------------------------------------------------------


class StubJudge:
    def __init__(self, available=(True, ""), verdict=None):
        self._available, self.verdict, self.calls = available, verdict, []

    def available(self):
        return self._available

    def run_tests(self, language, files, cases, user=None):
        self.calls.append((language, files, [case.name for case in cases]))
        return self.verdict


def started_program(tmp_path, judge):
    room = Classroom(tmp_path, judge=judge)
    room.close_task("warmup", "warm")
    room.ok("start_task", task_id="program")
    return room


@pytest.mark.parametrize(
    "judge, message",
    [
        (StubJudge(available=(False, "Docker engine unreachable")), "Docker engine unreachable"),
        (StubJudge(verdict=Verdict(status="internal_error", stderr="engine died")), "engine died"),
    ],
)
def test_code_test_judge_failures_are_internal_errors_without_an_attempt(tmp_path, judge, message):
    room = started_program(tmp_path, judge)
    result = room.call("submit", task_id="program", answer=SUM_PROGRAM)
    assert result.error_code == "INTERNAL_ERROR" and message in result.message
    assert room.ok("show_task", task_id="program")["submission_count"] == 0


def test_code_test_sends_the_answer_as_the_entry_file_and_reports_failures(tmp_path):
    verdict = Verdict(
        status="wrong_answer",
        tests=[
            TestResult(name="small", passed=True, message="passed"),
            TestResult(name="empty", passed=False, message="wrong answer: line 1 differs"),
        ],
    )
    judge = StubJudge(verdict=verdict)
    room = started_program(tmp_path, judge)
    out = room.ok("submit", task_id="program", answer="print(6)")
    assert judge.calls == [("python", {"main.py": "print(6)"}, ["small", "empty"])]
    assert out["result"] == "failed" and "1 of 2 tests passed" in out["checks"][0]["message"]
    assert "empty: wrong answer: line 1 differs" in out["checks"][0]["message"]
    judge.verdict = Verdict(
        status="ok", tests=[TestResult(name="small", passed=True), TestResult(name="empty", passed=True)]
    )
    assert room.ok("submit", task_id="program", answer=SUM_PROGRAM)["new_status"] == "closed"


# the shipped example: reference answers pass ------------------------------------------------

TEXT_AND_SQL_ANSWERS = {
    "loops": "A for loop repeats a known number of times; a while loop runs until a condition is false.",
    "complexity": "On average it is O(1), constant time.",
    "sql_select": "SELECT name FROM students WHERE grade >= 80 ORDER BY name",
    "sql_group_by": "SELECT course, COUNT(*) AS students FROM enrolments GROUP BY course",
}
PROGRAMS = {
    "hello_world": "print('Hello, world!')\n",
    "variables": "name = input()\nprint(f'Hello, {name}!')\n",
    "arithmetic": "a, b = map(int, input().split())\nprint(a + b)\nprint(a - b)\nprint(a * b)\n",
    "conditionals": "n = int(input())\nprint('even' if n % 2 == 0 else 'odd')\n",
    "loops_sum": "n = int(input())\ntotal = 0\nfor i in range(1, n + 1):\n    total += i\nprint(total)\n",
    "loops_fizzbuzz": (
        "n = int(input())\nfor i in range(1, n + 1):\n"
        "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)\n"
    ),
    "functions": (
        "def largest(numbers):\n    best = numbers[0]\n    for n in numbers[1:]:\n        if n > best:\n"
        "            best = n\n    return best\n\nprint(largest([int(x) for x in input().split()]))\n"
    ),
    "lists": "print(' '.join(str(n) for n in sorted(set(int(x) for x in input().split()))))\n",
    "dictionaries": (
        "counts = {}\nfor word in input().split():\n    counts[word] = counts.get(word, 0) + 1\n"
        "for word in sorted(counts):\n    print(word, counts[word])\n"
    ),
    "grade_calculator": (
        "def letter(average):\n    if average >= 90:\n        return 'A'\n    if average >= 80:\n        return 'B'\n"
        "    if average >= 70:\n        return 'C'\n    return 'F'\n\nscores = [int(x) for x in input().split()]\n"
        "average = sum(scores) / len(scores)\nprint(f'{average:.1f}')\nprint(letter(average))\n"
    ),
}


def test_example_text_and_sql_answers_pass_in_process():
    from learner.checks import outcome, run_checks

    tasks = {task.id: task for task in read_task_file(EXAMPLE).tasks}
    for task_id, answer in TEXT_AND_SQL_ANSWERS.items():
        results = run_checks(tasks[task_id].acceptance_criteria, answer, None, lambda cap: cap)
        assert outcome(results) == "passed", (task_id, results)
    wrong = run_checks(
        tasks["functions"].acceptance_criteria[1:], "def largest(x):\n    return max(x)", None, lambda cap: cap
    )
    assert [r.passed for r in wrong] == [True, False]


@pytest.mark.docker
def test_example_programs_pass_in_the_real_judge():
    from judge.service import Judge
    from learner.checks import outcome, run_checks

    judge = Judge.from_env()
    require_judge(*judge.available())
    try:
        tasks = {task.id: task for task in read_task_file(EXAMPLE).tasks}
        code_tasks = {t.id for t in tasks.values() if any(c.type == "code_test" for c in t.acceptance_criteria)}
        assert code_tasks == set(PROGRAMS)
        for task_id, program in PROGRAMS.items():
            automatic = [c for c in tasks[task_id].acceptance_criteria if c.type != "manual"]
            results = run_checks(automatic, program, judge, lambda cap: cap)
            assert outcome(results) == "passed", (task_id, results)
        failing = run_checks(tasks["conditionals"].acceptance_criteria, "print('even')", judge, lambda cap: cap)
        assert failing[0].passed is False and "2 of 4 tests passed" in failing[0].message
    finally:
        judge.close()


@pytest.mark.docker
def test_submit_tool_grades_code_in_the_real_judge(tmp_path):
    from judge.service import Judge

    judge = Judge.from_env()
    require_judge(*judge.available())
    try:
        room = started_program(tmp_path, judge)
        wrong = room.ok("submit", task_id="program", answer="print(6)")
        assert (wrong["attempt"], wrong["result"], wrong["new_status"]) == (1, "failed", "in_progress")
        assert "1 of 2 tests passed" in wrong["checks"][0]["message"] and "empty" in wrong["checks"][0]["message"]
        broken = room.ok("submit", task_id="program", answer="print(")
        assert broken["attempt"] == 2 and "SyntaxError" in broken["checks"][0]["message"]
        right = room.ok("submit", task_id="program", answer=SUM_PROGRAM)
        assert (right["attempt"], right["result"], right["new_status"]) == (3, "passed", "closed")
    finally:
        judge.close()
