"""The generation job: for each requested problem, draft -> validate -> verify -> store.

Each problem gets at most `MAX_ATTEMPTS` drafts. A draft is kept only if its reference
solution passes every one of its own tests in the judge AND its starter code fails at
least one (a starter that already passes would teach nothing). Progress goes to the
session's event bus with codes, counts and titles only: prompts, model replies,
reference solutions and tests never leave this module except into the database. The job
is the session's running turn while it lasts (one at a time, stoppable with cancel).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from activities.drafts import DraftRejected, parse_draft, schema_text
from foundation.cancellation import NEVER, Cancelled, CancelToken
from foundation.events import EventName
from judge.files import SubmissionError
from judge.languages import LANGUAGES
from judge.models import SqlCase, TestCase
from judge.service import Judge
from providers import ChatMessage, FallbackChain
from storage.connection import Store
from storage.problems import Activity, ActivityStatus, add_problem, set_activity_status

log = logging.getLogger("activities")

MAX_ATTEMPTS = 3
Publish = Callable[[EventName, dict[str, Any]], None]

SYSTEM = (
    "You write programming practice problems. Answer with ONE JSON object and nothing else "
    "(no prose, no markdown). The reference solution must pass every test exactly; the "
    "starter code must compile or parse but must not solve the task."
)


@dataclass(frozen=True)
class GenerationJob:
    database: Store
    chat: FallbackChain
    judge: Judge
    publish: Publish

    def run(self, user_id: int, activity: Activity, cancel: CancelToken = NEVER) -> dict[str, Any]:
        """Generate every problem of `activity`; returns the `done` payload (the runner publishes it).

        A cancelled job stops before its next draft and keeps the problems already stored.
        """
        self.publish(
            EventName.JOB_STARTED,
            {"activity_id": activity.id, "count": activity.requested, "language": activity.language},
        )
        stored: list[dict[str, str]] = []
        try:
            for index in range(activity.requested):
                if cancel.cancelled:
                    break
                problem = self._one(user_id, activity, index, [p["title"] for p in stored], cancel)
                if problem is not None:
                    stored.append(problem)
        except Cancelled:
            pass  # stopped by the user: keep what was stored
        except Exception:  # a job must always end: log, then report failure
            log.exception("generation job %s crashed", activity.id)
        status: ActivityStatus = "ready" if len(stored) == activity.requested else "partial" if stored else "failed"
        with self.database.connection() as conn:
            set_activity_status(conn, activity.id, status)
        return {"activity_id": activity.id, "status": status, "problems": stored, "stopped": cancel.cancelled}

    def _one(
        self, user_id: int, activity: Activity, index: int, taken: list[str], cancel: CancelToken
    ) -> dict[str, str] | None:
        feedback = ""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            if cancel.cancelled:
                return None
            self.publish(EventName.PROBLEM_STARTED, {"index": index, "attempt": attempt})
            try:
                title, statement, starter, reference, cases = self._draft(activity, index, taken, feedback, cancel)
                self._verify(activity.language, starter, reference, cases, cancel, user_id)
            except DraftRejected as rejected:
                self.publish(EventName.PROBLEM_REJECTED, {"index": index, "attempt": attempt, "code": rejected.code})
                feedback = f"Your previous draft was rejected: {rejected.message}. Fix it and answer again."
                continue
            entry = LANGUAGES[activity.language].entry
            with self.database.connection() as conn:
                problem = add_problem(
                    conn,
                    user_id=user_id,
                    activity_id=activity.id,
                    language=activity.language,
                    difficulty=activity.difficulty,
                    title=title,
                    statement=statement,
                    starter_files={entry: starter},
                    reference_files={entry: reference},
                    tests=[case.model_dump() for case in cases],
                    position=index,
                )
            self.publish(EventName.PROBLEM_STORED, {"index": index, "problem_id": problem.id, "title": title})
            return {"id": problem.id, "title": title}
        self.publish(EventName.PROBLEM_FAILED, {"index": index, "attempts": MAX_ATTEMPTS})
        return None

    def _draft(
        self,
        activity: Activity,
        index: int,
        taken: list[str],
        feedback: str,
        cancel: CancelToken = NEVER,
    ) -> tuple[str, str, str, str, list[TestCase] | list[SqlCase]]:
        """One draft from the model: title, statement, starter code, reference solution, tests."""
        prompt = (
            f"Write practice problem {index + 1} of {activity.requested} about: {activity.topic}\n"
            f"Language: {activity.language}. Difficulty: {activity.difficulty}.\n"
            + (f"Do not repeat these problems: {'; '.join(taken)}.\n" if taken else "")
            + f"Answer with JSON of this shape:\n{schema_text(activity.language)}\n"
            + (f"\n{feedback}" if feedback else "")
        )
        messages = [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=prompt)]
        reply = self.chat.call(messages, cancel=cancel).text
        cancel.raise_if_cancelled()
        if reply is None or not reply.strip():
            raise DraftRejected("provider_unavailable", "the model gave no answer")
        draft, cases = parse_draft(reply, activity.language)
        return draft.title, draft.statement, draft.starter_code, draft.reference_solution, cases

    def _verify(
        self,
        language: str,
        starter: str,
        reference: str,
        cases: list[TestCase] | list[SqlCase],
        cancel: CancelToken = NEVER,
        user_id: int | None = None,
    ) -> None:
        entry = LANGUAGES[language].entry
        try:
            verdict = self.judge.run_tests(language, {entry: reference}, cases, cancel=cancel, user=user_id)
        except SubmissionError as error:
            raise DraftRejected("invalid_tests", str(error)) from error
        if verdict.status != "ok":
            failing = next((t for t in verdict.tests or [] if not t.passed), None)
            detail = f"test {failing.name!r}: {failing.message}" if failing else verdict.status
            raise DraftRejected(
                "reference_failed", f"the reference solution fails its own tests ({verdict.status}; {detail})"
            )
        if self.judge.run_tests(language, {entry: starter}, cases, cancel=cancel, user=user_id).status == "ok":
            raise DraftRejected("starter_passes", "the starter code already passes every test; make it a skeleton")
