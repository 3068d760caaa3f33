"""`POST /run`, `POST /submit`, and generated activities (SPEC section 9).

Every endpoint answers 503 `judge_unavailable` (with the reason) when the Docker judge
cannot run here, or 503 `judge_preparing` while `scripts/judge_images.sh` still builds its
images (`judge/preparing.py`: `make run` serves the chat meanwhile); the rest of the product keeps working. `/submit` runs the problem's
stored, hidden tests: the client never sends tests, and the answer lists each test's
name and pass/fail message, never its expected output.
"""

from __future__ import annotations

from typing import Any, Literal

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from activities.generate import GenerationJob
from api.auth import current_user, require_user
from api.bodies import json_body
from api.database import get_db
from api.declare import NOT_FOUND, Reply, budget, operation
from api.errors import ApiError, not_found
from api.services import services as app_services
from api.sessions import session_for
from api.turns import desk
from foundation.cancellation import CancelToken
from judge.files import SubmissionError
from judge.models import Language, RunRequest, SqlCase, TestCase, Verdict
from judge.preparing import build_running
from judge.service import Judge
from pipeline.results import EventSink
from storage.connection import DbConnection
from storage.problems import (
    Activity,
    ProblemView,
    activity_problems,
    add_submission,
    create_activity,
    get_activity,
    get_problem,
    list_activities,
)

bp = Blueprint("judge", __name__)
bp.before_request(require_user)

MAX_FILES_BYTES = 1024 * 1024
PREPARING_MESSAGE = (
    "The code runner is being prepared: its images are being built (the first time takes several minutes). "
    "The chat works meanwhile; try again in a few minutes."
)
JUDGE_OFF = Reply(
    "the Docker judge cannot run here or is switched off (`judge_unavailable`, with the reason), its images are "
    "still being built (`judge_preparing`), or every run "
    "place stayed held by other users' runs (`busy`, with `Retry-After`)",
    headers=("Retry-After",),
)


class RunBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    language: Language
    files: dict[str, str] = Field(min_length=1, max_length=20)
    stdin: str = Field(default="", max_length=1024 * 1024)


class SubmitBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    problem_id: str = Field(min_length=1, max_length=64)
    language: Language
    files: dict[str, str] = Field(min_length=1, max_length=20)


class GenerateBody(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    topic: str = Field(min_length=2, max_length=300)
    language: Language
    count: int = Field(default=3, ge=1, le=10)
    difficulty: Literal["easy", "medium", "hard"] = "easy"
    session_id: str | None = Field(default=None, max_length=64)


class SubmitResult(Verdict):
    """The verdict of the problem's hidden tests (each test's name, pass/fail and message), stored."""

    submission_id: int
    problem_id: str


class GenerationStarted(BaseModel):
    """202: the job runs as the session's turn; follow it on `stream`."""

    activity_id: str
    session_id: str
    status: str
    turn_id: str
    stream: str = Field(description="the progress stream's path (GET /sessions/<id>/generate/stream)")


class ActivityList(BaseModel):
    activities: list[Activity]


class ActivityDetail(Activity):
    problems: list[ProblemView]


def ready_judge() -> Judge:
    """The judge, or 503: `judge_preparing` while its images are being built, else `judge_unavailable`."""
    judge = app_services().judge
    if judge is None:
        available, reason = False, str(app_services().judge_status["reason"])
    else:
        available, reason = judge.available()
    if available and judge is not None:
        return judge
    if build_running(app_services().settings.data_dir):
        raise ApiError(503, "judge_preparing", PREPARING_MESSAGE)
    raise ApiError(503, "judge_unavailable", reason)


def checked_size(files: dict[str, str]) -> dict[str, str]:
    if sum(len(name) + len(content.encode()) for name, content in files.items()) > MAX_FILES_BYTES:
        raise ApiError(413, "files_too_large", f"files may hold at most {MAX_FILES_BYTES // 1024} KiB in total")
    return files


@bp.post("/run")
@operation(
    "Run files once in the Docker judge",
    body=RunBody,
    replies={200: Reply("the verdict", Verdict), 413: Reply("files over 1 MiB in total"), 503: JUDGE_OFF},
)
@budget("runs")
def run() -> ResponseReturnValue:
    body: RunBody = json_body(RunBody)
    judge = ready_judge()
    try:
        request = RunRequest(language=body.language, files=checked_size(body.files), stdin=body.stdin)
        verdict = judge.run(request, user=current_user().id)  # no place in time: `Busy`, 503 (api.errors)
    except SubmissionError as error:
        raise ApiError(400, "invalid_files", str(error)) from error
    return jsonify(verdict.to_dict())


@bp.post("/submit")
@operation(
    "Run a generated problem's hidden tests on a solution",
    body=SubmitBody,
    replies={
        200: Reply("the verdict per test (never the expected output)", SubmitResult),
        404: NOT_FOUND,
        413: Reply("files over 1 MiB in total"),
        503: JUDGE_OFF,
    },
)
@budget("runs")
def submit() -> ResponseReturnValue:
    body: SubmitBody = json_body(SubmitBody)
    conn, user = get_db(), current_user()
    problem = get_problem(conn, user.id, body.problem_id)
    if problem is None:
        raise not_found("problem")
    if body.language != problem.language:
        raise ApiError(400, "wrong_language", f"this problem is solved in {problem.language}")
    judge = ready_judge()
    adapter = TypeAdapter(list[SqlCase] if problem.language == "sql" else list[TestCase])
    try:
        cases = adapter.validate_python(problem.tests)
        verdict = judge.run_tests(problem.language, checked_size(body.files), cases, user=user.id)
    except SubmissionError as error:
        raise ApiError(400, "invalid_files", str(error)) from error
    result = verdict.to_dict()
    submission = add_submission(
        conn, user_id=user.id, problem_id=problem.id, language=body.language, files=body.files, verdict=result
    )
    return jsonify(SubmitResult(**verdict.model_dump(), submission_id=submission.id, problem_id=problem.id).to_dict())


@bp.post("/activities/generate")
@operation(
    "Generate practice problems (a job; follow its stream)",
    body=GenerateBody,
    replies={
        202: Reply("the job started", GenerationStarted),
        404: NOT_FOUND,
        409: Reply("the session is answering a turn (`turn_in_progress`)"),
        503: JUDGE_OFF,
    },
)
@budget("generate", by_view=("sessions",))
def generate() -> ResponseReturnValue:
    body: GenerateBody = json_body(GenerateBody)
    conn, user = get_db(), current_user()
    judge = ready_judge()
    session = session_for(body.session_id, f"Practice: {body.topic}"[:60])
    services = app_services().turns
    with desk().claim(session.id, user_id=user.id, kind="generation") as claim:  # the job is the session's turn
        activity = create_activity(
            conn,
            user_id=user.id,
            session_id=session.id,
            topic=body.topic,
            language=body.language,
            difficulty=body.difficulty,
            count=body.count,
        )

        def work(conn: DbConnection, emit: EventSink, cancel: CancelToken) -> dict[str, Any]:
            job = GenerationJob(database=services.database, chat=services.chat, judge=judge, publish=emit)
            return job.run(user.id, activity, cancel)

        lease = claim.start(work)
    started = GenerationStarted(
        activity_id=activity.id,
        session_id=session.id,
        status=activity.status,
        turn_id=lease.turn_id,
        stream=f"/sessions/{session.id}/generate/stream",
    )
    return jsonify(started.model_dump(mode="json")), 202


@bp.get("/activities")
@operation("The user's generated activities", replies={200: Reply("newest first", ActivityList)})
def activities() -> ResponseReturnValue:
    return jsonify(ActivityList(activities=list_activities(get_db(), current_user().id)).model_dump(mode="json"))


@bp.get("/activities/<activity_id>")
@operation("One activity with its problems", replies={200: Reply("the activity", ActivityDetail), 404: NOT_FOUND})
def activity(activity_id: str) -> ResponseReturnValue:
    conn, user = get_db(), current_user()
    found = get_activity(conn, user.id, activity_id)
    if found is None:
        raise not_found("activity")
    problems = [problem.view() for problem in activity_problems(conn, user.id, activity_id)]
    return jsonify(ActivityDetail(**found.model_dump(), problems=problems).model_dump(mode="json"))


@bp.get("/problems/<problem_id>")
@operation("One problem (the learner's view)", replies={200: Reply("the problem", ProblemView), 404: NOT_FOUND})
def problem(problem_id: str) -> ResponseReturnValue:
    found = get_problem(get_db(), current_user().id, problem_id)
    if found is None:
        raise not_found("problem")
    return jsonify(found.view().model_dump(mode="json"))
