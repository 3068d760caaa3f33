"""`api/services.py`: create_app stores one typed Services value; tools get its services as typed fields."""

from __future__ import annotations

from flask import Flask

from api.services import SERVICES_KEY, Services, services, services_of
from bounded.pool import WorkerPool
from pipeline.results import tool_context


def test_create_app_stores_one_services_value_read_through_one_accessor(app: Flask) -> None:
    found = services_of(app)
    assert isinstance(found, Services) and app.extensions[SERVICES_KEY] is found
    with app.app_context():
        assert services() is found
    assert found.turns.database is found.database and found.turns.settings is found.settings
    assert found.turns.judge is found.judge and found.turns.bounded is found.bounded
    assert isinstance(found.bounded, WorkerPool)
    assert found.judge is None and found.judge_status["available"] is False  # the test settings turn it off


def test_a_tool_context_carries_the_apps_services_as_typed_fields(app: Flask) -> None:
    turns = services_of(app).turns
    with turns.database.connection() as conn:
        ctx = tool_context(turns, conn, user_id=1, session_id="s")
    assert ctx.bounded is turns.bounded and ctx.vision is turns.vision and ctx.judge is turns.judge
    assert (ctx.user_id, ctx.session_id, ctx.settings) == (1, "s", turns.settings)
