"""`/imagine <prompt>`: image generation through the configured image provider.

Two wire shapes: `openai` (POST `{IMAGE_BASE_URL}/images/generations`, answer
`data[0].b64_json` or `data[0].url`) and `chutes` (POST `IMAGE_BASE_URL`, answer either the
image bytes or the same JSON). The image is checked by content and stored under
`DATA_DIR/generated/<user>/`. Success ends the turn (no second pass): the stored contract
renders as the image.
"""

from __future__ import annotations

import base64
import binascii

import requests
from pydantic import Field

from storage.uploads import ImageRejected, save_image
from tools.base import CommandBinding, ErrorCode, Need, Tool, ToolContext, ToolFailure, ToolInput, ToolOutput
from tools.safe_http import safe_get
from tools.upstream import Upstream, refuse_http_error, send

TIMEOUT_S = 120
MAX_DOWNLOAD_BYTES = 10 * 1024 * 1024
GENERATED_FOLDER = "generated"
IMAGE_PROVIDER = Upstream(
    name="the image provider", on_timeout="try a simpler prompt later", on_status="try again later or change the prompt"
)


class ImagineInput(ToolInput):
    prompt: str = Field(min_length=3, max_length=2000, description="What the image should show.")


class ImagineOutput(ToolOutput):
    prompt: str
    url: str
    width: int
    height: int

    def render(self) -> str:
        return f"![{self.prompt}]({self.url})\nGenerated a {self.width}×{self.height} image."


def _post(ctx: ToolContext, url: str, payload: dict[str, object]) -> requests.Response:
    settings = ctx.settings
    headers = {"Authorization": f"Bearer {settings.image_api_key}"} if settings.image_api_key else {}
    response = send(IMAGE_PROVIDER, "POST", url, json=payload, headers=headers, timeout=ctx.remaining(TIMEOUT_S))
    refuse_http_error(IMAGE_PROVIDER, response)
    return response


def _image_bytes(response: requests.Response, ctx: ToolContext) -> bytes:
    if response.headers.get("Content-Type", "").startswith("image/"):
        return response.content
    try:
        item = response.json()["data"][0]
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise ToolFailure(ErrorCode.UPSTREAM_ERROR, "the image provider's answer held no image.") from error
    if item.get("b64_json"):
        try:
            return base64.b64decode(item["b64_json"])
        except (binascii.Error, ValueError) as error:
            raise ToolFailure(ErrorCode.UPSTREAM_ERROR, "the image provider sent invalid base64.") from error
    if item.get("url"):
        # The URL comes from a remote answer, so it is fetched under the SSRF rules.
        return safe_get(str(item["url"]), ctx, max_bytes=MAX_DOWNLOAD_BYTES, accept_text_only=False).body
    raise ToolFailure(ErrorCode.UPSTREAM_ERROR, "the image provider's answer held no image.")


def imagine(data: ImagineInput, ctx: ToolContext) -> ImagineOutput:
    settings = ctx.settings
    if not settings.image_provider or not settings.image_base_url:
        raise ToolFailure(
            ErrorCode.NOT_CONFIGURED,
            "image generation is not configured (IMAGE_PROVIDER, IMAGE_BASE_URL).",
            hint="Answer without an image.",
        )
    base = settings.image_base_url.rstrip("/")
    if settings.image_provider == "openai":
        payload = {
            "model": settings.image_model or "gpt-image-1",
            "prompt": data.prompt,
            "n": 1,
            "size": "1024x1024",
            "response_format": "b64_json",
        }
        response = _post(ctx, f"{base}/images/generations", payload)
    else:
        response = _post(ctx, base, {"model": settings.image_model, "prompt": data.prompt})
    try:
        stored = save_image(settings.data_dir, ctx.user_id, _image_bytes(response, ctx), folder=GENERATED_FOLDER)
    except ImageRejected as error:
        raise ToolFailure(ErrorCode.UPSTREAM_ERROR, f"the image provider sent something unusable: {error}") from error
    return ImagineOutput(prompt=data.prompt, url=f"/files/{stored.path}", width=stored.width, height=stored.height)


IMAGINE_TOOL = Tool(
    name="imagine",
    description="Generate an image from a text description; the image is shown to the user directly.",
    input_model=ImagineInput,
    output_model=ImagineOutput,
    handler=imagine,
    result_role="image_tools",
    needs=frozenset({Need.IMAGE_PROVIDER}),
    command=CommandBinding(
        name="imagine",
        usage="/imagine <description of the image>",
        example="/imagine a watercolor fox in a snowy forest",
        request="Draw me a watercolor fox in a snowy forest.",
        demonstrates=False,  # any sentence fits its argument: shown, it swallows every message
        args_field="prompt",
    ),
    terminal_on_success=True,
    timeout_s=TIMEOUT_S + 10,
    budget="turns",  # a direct call reaches an image model
)
