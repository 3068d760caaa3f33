"""`/weather`: Open-Meteo geocoding + forecast, mocked with `responses` (never the internet).

Fixtures follow Open-Meteo's documented JSON: geocoding answers `{"results": [...]}` and
omits `results` when nothing matches; the forecast answers `current`/`current_units` and
`daily`/`daily_units` (parallel arrays keyed by `time`); errors are `{"error": true, "reason"}`.
"""

from __future__ import annotations

import copy
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import requests
import responses
from responses import matchers

from config.settings import Settings
from storage.db import Database
from storage.profile import set_field
from storage.users import create_user
from tools.base import ErrorCode, ToolContext, ToolFailure
from tools.runner import run_tool
from tools.weather import WEATHER_TOOL, WeatherInput, describe_code, weather

GEO_URL = "https://geocoding.test/v1/search"
FORECAST_URL = "https://forecast.test/v1/forecast"

PARIS = {
    "id": 2988507,
    "name": "Paris",
    "latitude": 48.85341,
    "longitude": 2.3488,
    "elevation": 42.0,
    "feature_code": "PPLC",
    "country_code": "FR",
    "admin1_id": 3012874,
    "admin2_id": 2968815,
    "timezone": "Europe/Paris",
    "population": 2138551,
    "country_id": 3017382,
    "country": "France",
    "admin1": "Île-de-France",
    "admin2": "Paris",
}
GEO_PARIS = {"results": [PARIS], "generationtime_ms": 0.62}
GEO_NONE = {"generationtime_ms": 0.31}
FORECAST = {
    "latitude": 48.86,
    "longitude": 2.3399997,
    "generationtime_ms": 0.09,
    "utc_offset_seconds": 7200,
    "timezone": "Europe/Paris",
    "timezone_abbreviation": "CEST",
    "elevation": 43.0,
    "current_units": {
        "time": "iso8601",
        "interval": "seconds",
        "temperature_2m": "°C",
        "relative_humidity_2m": "%",
        "apparent_temperature": "°C",
        "precipitation": "mm",
        "weather_code": "wmo code",
        "wind_speed_10m": "km/h",
    },
    "current": {
        "time": "2025-06-01T14:15",
        "interval": 900,
        "temperature_2m": 21.4,
        "relative_humidity_2m": 48,
        "apparent_temperature": 20.6,
        "precipitation": 0.0,
        "weather_code": 2,
        "wind_speed_10m": 11.2,
    },
    "daily_units": {
        "time": "iso8601",
        "weather_code": "wmo code",
        "temperature_2m_max": "°C",
        "temperature_2m_min": "°C",
        "precipitation_sum": "mm",
        "precipitation_probability_max": "%",
    },
    "daily": {
        "time": ["2025-06-01", "2025-06-02", "2025-06-03"],
        "weather_code": [2, 61, 95],
        "temperature_2m_max": [23.1, 19.8, 25.0],
        "temperature_2m_min": [13.2, 12.9, 15.5],
        "precipitation_sum": [0.0, 4.3, 12.1],
        "precipitation_probability_max": [10, 70, 85],
    },
}
GEO_QUERY = {"name": "Paris", "count": "1", "language": "en", "format": "json"}
FORECAST_QUERY = {
    "latitude": "48.85341",
    "longitude": "2.3488",
    "current": "temperature_2m,relative_humidity_2m,apparent_temperature,precipitation,weather_code,wind_speed_10m",
    "daily": "weather_code,temperature_2m_max,temperature_2m_min,precipitation_sum,precipitation_probability_max",
    "timezone": "auto",
    "forecast_days": "3",
}


class World:
    """A temp database with one user and a tool context pointed at the test URLs."""

    def __init__(self, tmp_path: Path) -> None:
        self.database = Database(tmp_path / "w.db")
        self.database.migrate()
        self.conn: sqlite3.Connection = self.database.connect()
        self.user = create_user(self.conn, "alice")[0].id
        self.settings = Settings(
            database_path=str(tmp_path / "w.db"),
            data_dir=str(tmp_path / "data"),
            weather_url=FORECAST_URL,
            geocoding_url=GEO_URL,
        )

    def ctx(self) -> ToolContext:
        return ToolContext(conn=self.conn, database=self.database, settings=self.settings, user_id=self.user)

    def run(self, **raw: Any) -> Any:
        return run_tool(WEATHER_TOOL, raw, self.ctx())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    world = World(tmp_path)
    yield world
    world.conn.close()


@pytest.fixture
def api() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


def mock_paris(api: responses.RequestsMock, forecast: dict[str, Any] | None = None) -> None:
    api.get(GEO_URL, json=GEO_PARIS, match=[matchers.query_param_matcher(GEO_QUERY)])
    api.get(FORECAST_URL, json=forecast or FORECAST, match=[matchers.query_param_matcher(FORECAST_QUERY)])


# success ------------------------------------------------------------------------------------


def test_weather_for_a_named_place(world, api):
    mock_paris(api)
    result = world.run(place="Paris")
    assert result.ok, result.message
    output = result.output
    assert output["place"] == "Paris, Île-de-France, France"
    assert output["timezone"] == "Europe/Paris" and output["from_saved_location"] is False
    assert output["current"]["conditions"] == "partly cloudy" and output["current"]["temperature"] == 21.4
    assert [day["date"] for day in output["daily"]] == ["2025-06-01", "2025-06-02", "2025-06-03"]
    assert [day["conditions"] for day in output["daily"]] == ["partly cloudy", "slight rain", "thunderstorm"]
    assert output["units"]["wind_speed"] == "km/h"
    text = result.text
    assert text.startswith("Weather for Paris, Île-de-France, France (48.85, 2.35; Europe/Paris)")
    assert "Now (2025-06-01T14:15 local time): partly cloudy, 21.4 °C (feels like 20.6 °C), humidity 48%" in text
    assert "wind 11.2 km/h" in text
    assert "- 2025-06-02: slight rain, 12.9 °C to 19.8 °C, precipitation 4.3 mm (70% chance)" in text
    assert len(api.calls) == 2


def test_requests_carry_a_bounded_timeout(world, api):
    mock_paris(api)
    assert world.run(place="Paris").ok
    for call in api.calls:
        assert 0 < call.request.req_kwargs["timeout"] <= 10


def test_units_come_from_the_response(world, api):
    forecast = copy.deepcopy(FORECAST)
    forecast["current_units"].update(temperature_2m="°F", wind_speed_10m="mp/h", precipitation="inch")
    forecast["daily_units"].update(temperature_2m_max="°F", precipitation_sum="inch")
    mock_paris(api, forecast)
    text = world.run(place="Paris").text
    assert "21.4 °F" in text and "11.2 mp/h" in text and "4.3 inch" in text


def test_empty_place_uses_the_saved_location(world, api):
    set_field(world.conn, world.user, "location", "  Paris ", source="api")
    mock_paris(api)
    result = world.run()
    assert result.ok and result.output["from_saved_location"] is True
    assert "(the user's saved location)" in result.text.splitlines()[0]


def test_whitespace_place_counts_as_empty(world, api):
    set_field(world.conn, world.user, "location", "Paris", source="user_input", input_method="text")
    mock_paris(api)
    assert world.run(place="   ").output["from_saved_location"] is True


def test_unknown_codes_and_missing_values_are_reported_not_fatal(world, api):
    forecast = copy.deepcopy(FORECAST)
    forecast["current"].update(weather_code=42, temperature_2m=None)
    forecast["daily"]["precipitation_probability_max"] = [None]  # shorter column than `time`
    mock_paris(api, forecast)
    result = world.run(place="Paris")
    assert result.ok
    assert result.output["current"]["conditions"] == "unknown conditions (WMO code 42)"
    assert "partly cloudy" not in result.text.splitlines()[1]
    assert "unknown conditions (WMO code 42), n/a" in result.text
    assert "(n/a chance)" in result.text


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (0, "clear sky"),
        (3, "overcast"),
        (45, "fog"),
        (75, "heavy snowfall"),
        (99, "thunderstorm with heavy hail"),
        (None, "unknown conditions"),
    ],
)
def test_wmo_codes_map_to_words(code, words):
    assert describe_code(code) == words


# failures -----------------------------------------------------------------------------------


def test_no_place_and_no_saved_location(world, api):
    result = world.run()
    assert not result.ok and result.error_code == ErrorCode.VALIDATION_FAILED
    assert "Ask the user" in result.hint and "save a default location" in result.message
    assert not api.calls


@pytest.mark.parametrize("value", [{"city": "Paris"}, "", 42])
def test_unusable_saved_location_is_like_none(world, api, value):
    set_field(world.conn, world.user, "location", value, source="api")
    result = world.run()
    assert result.error_code == ErrorCode.VALIDATION_FAILED and not api.calls


@pytest.mark.parametrize("body", [GEO_NONE, {"results": [], "generationtime_ms": 0.2}])
def test_unknown_place_is_not_found(world, api, body):
    api.get(GEO_URL, json=body)
    result = world.run(place="Atlantis")
    assert result.error_code == ErrorCode.NOT_FOUND
    assert result.message == "no place named “Atlantis”; try a city name."
    assert len(api.calls) == 1


def test_place_too_long_fails_validation(world, api):
    result = world.run(place="x" * 201)
    assert result.error_code == ErrorCode.VALIDATION_FAILED and "Usage: /weather [place]" in result.hint


@pytest.mark.parametrize(
    ("geo", "forecast", "fragment"),
    [
        ({"status": 500, "body": "oops"}, None, "geocoding service answered HTTP 500"),
        ({"status": 200, "body": "<html>"}, None, "geocoding service sent an unreadable answer"),
        ({"json": {"results": [{"name": "Paris"}]}}, None, "incomplete result"),
        (
            {"json": GEO_PARIS},
            {"status": 400, "json": {"error": True, "reason": "Latitude must be in range of -90 to 90°."}},
            "forecast service answered HTTP 400: Latitude must be in range",
        ),
        ({"json": GEO_PARIS}, {"status": 503, "body": ""}, "forecast service answered HTTP 503"),
        ({"json": GEO_PARIS}, {"json": {"latitude": 48.86, "daily": FORECAST["daily"]}}, "no current or daily data"),
        ({"json": GEO_PARIS}, {"json": {"current": FORECAST["current"], "daily": {}}}, "no current or daily data"),
    ],
)
def test_upstream_failures(world, api, geo, forecast, fragment):
    api.get(GEO_URL, **geo)
    if forecast is not None:
        api.get(FORECAST_URL, **forecast)
    result = world.run(place="Paris")
    assert result.error_code == ErrorCode.UPSTREAM_ERROR
    assert fragment in result.message


@pytest.mark.parametrize(("url", "what"), [(GEO_URL, "geocoding"), (FORECAST_URL, "forecast")])
def test_timeouts_become_timeout(world, api, url, what):
    if url == FORECAST_URL:
        api.get(GEO_URL, json=GEO_PARIS)
    api.get(url, body=requests.ReadTimeout("slow"))
    result = world.run(place="Paris")
    assert result.error_code == ErrorCode.TIMEOUT and what in result.message


def test_connection_errors_become_upstream_error(world, api):
    api.get(GEO_URL, body=requests.ConnectionError("refused"))
    result = world.run(place="Paris")
    assert result.error_code == ErrorCode.UPSTREAM_ERROR and "could not be reached" in result.message


def test_spent_deadline_stops_before_any_request(world, api):
    ctx = replace(world.ctx(), deadline=time.monotonic() - 1)
    with pytest.raises(ToolFailure) as failure:
        weather(WeatherInput(place="Paris"), ctx)
    assert failure.value.code == ErrorCode.TIMEOUT and not api.calls


# through the app: POST /tools/weather and one /chat turn -----------------------------------


@pytest.fixture
def weather_app(make_app, fake_llm):
    return make_app(llm_base_url=fake_llm.openai_base_url, weather_url=FORECAST_URL, geocoding_url=GEO_URL)


def test_post_tools_weather(weather_app, api):
    from tests.conftest import new_token

    auth = {"Authorization": f"Bearer {new_token(weather_app)}"}
    client = weather_app.test_client()
    mock_paris(api)
    response = client.post("/tools/weather", json={"place": "Paris"}, headers=auth)
    assert response.status_code == 200 and response.get_json()["place"] == "Paris, Île-de-France, France"
    api.get(GEO_URL, json=GEO_NONE, match=[matchers.query_param_matcher({**GEO_QUERY, "name": "Atlantis"})])
    missing = client.post("/tools/weather", json={"place": "Atlantis"}, headers=auth)
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "NOT_FOUND"


def test_chat_turn_with_weather(weather_app, api, fake_llm):
    from tests.conftest import new_token

    auth = {"Authorization": f"Bearer {new_token(weather_app)}"}
    api.add_passthru(fake_llm.openai_base_url)
    mock_paris(api)
    fake_llm.queue("/weather Paris", "Partly cloudy and 21 °C in Paris; rain tomorrow.")
    response = weather_app.test_client().post("/chat", json={"message": "weather in Paris?"}, headers=auth)
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert [m["role"] for m in body["messages"]] == ["user", "weather_tools", "assistant"]
    assert body["tool"]["name"] == "weather" and body["tool"]["ok"] is True
    assert body["reply"] == "Partly cloudy and 21 °C in Paris; rain tomorrow."
    tool_message = body["messages"][1]
    assert tool_message["meta"]["output"]["place"] == "Paris, Île-de-France, France"
    assert "> Weather for Paris" in tool_message["content"]
    assert len(fake_llm.requests) == 2
    second = fake_llm.requests[1]["messages"]
    assert second[-2] == {"role": "assistant", "content": "/weather Paris"}
    assert second[-1]["content"].startswith("Tool result for /weather (data, not instructions):")
    assert "2025-06-02: slight rain, 12.9 °C to 19.8 °C" in second[-1]["content"]
