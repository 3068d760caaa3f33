"""`/imagine`: OpenAI images API (b64_json or URL) and Chutes shapes, stored PNGs, errors."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import requests
import responses

from config.settings import Settings
from storage.db import Database
from testing.fake_llm import tiny_png
from testing.fake_web import FakeWebServer, Page
from tools.base import ToolContext
from tools.imagine import IMAGINE_TOOL
from tools.runner import run_tool

IMAGES = "http://127.0.0.1:7001/v1"


def context(tmp_path: Path, **settings) -> ToolContext:
    database = Database(tmp_path / "t.db")
    database.migrate()
    values = {
        "database_path": database.path,
        "data_dir": str(tmp_path / "data"),
        "image_provider": "openai",
        "image_base_url": IMAGES,
        "image_api_key": "img-key",
        "image_model": "gpt-image-1",
        **settings,
    }
    return ToolContext(conn=database.connect(), database=database, settings=Settings(**values), user_id=7)


def call(ctx: ToolContext, prompt: str = "a red square"):
    return run_tool(IMAGINE_TOOL, {"prompt": prompt}, ctx)


@responses.activate
def test_openai_b64_json_is_stored_as_png(tmp_path):
    responses.add(
        responses.POST,
        f"{IMAGES}/images/generations",
        json={"created": 1, "data": [{"b64_json": base64.b64encode(tiny_png(4, 3)).decode()}]},
    )
    result = call(context(tmp_path))
    assert result.ok, result.message
    sent = json.loads(responses.calls[0].request.body)
    assert sent == {
        "model": "gpt-image-1",
        "prompt": "a red square",
        "n": 1,
        "size": "1024x1024",
        "response_format": "b64_json",
    }
    assert responses.calls[0].request.headers["Authorization"] == "Bearer img-key"
    output = result.output
    assert (output["width"], output["height"]) == (4, 3)
    assert output["url"].startswith("/files/generated/7/") and output["url"].endswith(".png")
    stored = tmp_path / "data" / output["url"].removeprefix("/files/")
    assert stored.read_bytes() == tiny_png(4, 3)
    assert result.text.startswith(f"![a red square]({output['url']})")


@responses.activate
def test_chutes_raw_image_bytes(tmp_path):
    responses.add(responses.POST, "http://127.0.0.1:7002/generate", body=tiny_png(), content_type="image/png")
    result = call(context(tmp_path, image_provider="chutes", image_base_url="http://127.0.0.1:7002/generate"))
    assert result.ok, result.message
    assert json.loads(responses.calls[0].request.body) == {"model": "gpt-image-1", "prompt": "a red square"}


def test_url_answer_is_fetched_under_the_ssrf_rules(tmp_path):
    with FakeWebServer({"/img.png": Page(body=tiny_png(), content_type="image/png")}) as web:
        answer = {"data": [{"url": web.url("/img.png")}]}
        with responses.RequestsMock() as mock:
            mock.add(responses.POST, f"{IMAGES}/images/generations", json=answer)
            refused = call(context(tmp_path))
        assert not refused.ok and refused.error_code == "PERMISSION_DENIED"
        assert web.requests == []
        with responses.RequestsMock() as mock:
            mock.add(responses.POST, f"{IMAGES}/images/generations", json=answer)
            mock.add_passthru(web.base_url)
            allowed = call(context(tmp_path, allow_private_fetch=True))
        assert allowed.ok, allowed.message


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        ({"status": 500, "json": {"error": "boom"}}, "UPSTREAM_ERROR"),
        ({"json": {"data": []}}, "UPSTREAM_ERROR"),
        ({"json": {"data": [{"b64_json": base64.b64encode(b"not an image").decode()}]}}, "UPSTREAM_ERROR"),
        ({"body": "not json", "content_type": "text/plain"}, "UPSTREAM_ERROR"),
    ],
)
@responses.activate
def test_provider_failures_are_upstream_errors(tmp_path, reply, code):
    responses.add(responses.POST, f"{IMAGES}/images/generations", **reply)
    result = call(context(tmp_path))
    assert (result.ok, result.error_code) == (False, code)
    assert not (tmp_path / "data" / "generated").exists() or not any((tmp_path / "data" / "generated").rglob("*"))


def test_not_configured(tmp_path):
    result = call(context(tmp_path, image_provider=None))
    assert (result.ok, result.error_code) == (False, "NOT_CONFIGURED")


@pytest.mark.parametrize("prompt", ["", "ab", "x" * 2001])
def test_prompt_is_validated(tmp_path, prompt):
    assert call(context(tmp_path), prompt).error_code == "VALIDATION_FAILED"


@pytest.mark.parametrize(
    ("reply", "code", "message"),
    [
        (
            {"body": requests.ReadTimeout("slow")},
            "TIMEOUT",
            "the image provider did not answer in time; try a simpler prompt later.",
        ),
        (
            {"body": requests.ConnectionError("refused")},
            "UPSTREAM_ERROR",
            "the image provider could not be reached; try again later.",
        ),
        (
            {"status": 503, "body": ""},
            "UPSTREAM_ERROR",
            "the image provider answered HTTP 503; try again later or change the prompt.",
        ),
    ],
)
@responses.activate
def test_transport_failures_keep_their_wording(tmp_path, reply, code, message):
    responses.add(responses.POST, f"{IMAGES}/images/generations", **reply)
    result = call(context(tmp_path))
    assert (result.ok, result.error_code, result.message) == (False, code, message)
