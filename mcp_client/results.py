"""An MCP `CallToolResult` as our tool result: data, within the caps every tool has (SPEC 12).

- text blocks are joined (in order) into the text the model reads;
- `structuredContent` is kept as the structured output (`meta.output.structured`), and
  shown as JSON when the server sent no text;
- images are checked and stored like uploads (`storage/uploads.py`, folder `generated`) and
  named in the text by their `/files/…` URL; an image that is not an acceptable picture is
  named as refused, never stored;
- an embedded text resource shows its URI and text, a binary one its URI, type and size,
  a resource link its URI; audio its type and size (not stored);
- `isError` is an error result (`ToolFailure`, code `UPSTREAM_ERROR`) whose message is the
  server's text.

The caps themselves are applied after, by the runner (`tools.result_caps.bounded`) and the
contract (`tools/contract.py`): 64 KiB of text, 256 KiB of structured output, marked when cut.
Before that, this module bounds the work: at most `MAX_BLOCKS` blocks are read and at most
`MAX_IMAGES` images stored per call.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import mcp_types as types
from pydantic import BaseModel, ConfigDict

from storage.uploads import ImageRejected, save_image
from tools.base import ErrorCode, ToolContext, ToolFailure
from tools.generic import TextOutput
from tools.result_caps import MAX_TEXT_CHARS

MAX_BLOCKS = 200
MAX_IMAGES = 4  # as many as a user may attach to one turn (storage/uploads.py)
IMAGE_FOLDER = "generated"


class McpImage(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: str  # /files/generated/<user>/<name>
    mime: str
    width: int
    height: int


class McpOutput(TextOutput):
    """What an MCP tool answered: its text, its structured content, the images stored."""

    structured: Any = None
    images: tuple[McpImage, ...] = ()
    blocks: int = 0  # content blocks the server sent


def _decoded_size(data: str) -> int:
    return len(data) * 3 // 4


def describe_block(block: types.ContentBlock, ctx: ToolContext, images: list[McpImage]) -> str:
    """The text one content block adds to the result (storing an image on the way)."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        if len(images) >= MAX_IMAGES:
            return f"[image left out: more than {MAX_IMAGES} images in one result]"
        try:
            stored = save_image(
                ctx.settings.data_dir, ctx.user_id, base64.b64decode(block.data, validate=True), IMAGE_FOLDER
            )
        except (binascii.Error, ValueError, ImageRejected) as error:
            return f"[image refused: {error}]"
        image = McpImage(url=f"/files/{stored.path}", mime=stored.mime, width=stored.width, height=stored.height)
        images.append(image)
        return f"[image {image.url} ({image.mime}, {image.width}x{image.height})]"
    if isinstance(block, types.AudioContent):
        return f"[audio ({block.mime_type}, {_decoded_size(block.data)} bytes) not kept]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        return f"[resource {resource.uri} ({resource.mime_type or 'binary'}, {_decoded_size(resource.blob)} bytes)]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}" + (f": {block.description}]" if block.description else "]")
    return f"[{getattr(block, 'type', 'unknown')} content]"


def as_output(result: types.CallToolResult, ctx: ToolContext) -> McpOutput:
    """The tool's output, or `ToolFailure` for an `isError` result."""
    images: list[McpImage] = []
    parts: list[str] = []
    size = 0
    for block in result.content[:MAX_BLOCKS]:
        if size > MAX_TEXT_CHARS:  # the rest could never be shown: stop reading (images included)
            break
        part = describe_block(block, ctx, images) if not result.is_error else _text_only(block)
        parts.append(part)
        size += len(part) + 1
    text = "\n".join(part for part in parts if part)
    if result.is_error:
        raise ToolFailure(ErrorCode.UPSTREAM_ERROR, text or "the MCP server reported an error without a message.")
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, indent=2)[: MAX_TEXT_CHARS + 1]
    return McpOutput(
        text=text or "(no content)",
        structured=result.structured_content,
        images=tuple(images),
        blocks=len(result.content),
    )


def _text_only(block: types.ContentBlock) -> str:
    return block.text if isinstance(block, types.TextContent) else ""
