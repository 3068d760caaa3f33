"""OpenAI's wire shapes for `/v1` (SPEC 11): errors, tool blocks, completions and chunks.

Everything here turns what our turns already produce (the `done`/`error` outcome and the
live events of `events/`) into what an OpenAI client parses; nothing here runs a turn.

- Errors: `{"error": {"message", "type", "code", "param"}}`, converted from our own error
  bodies, so every refusal (401, 400, 404, 409, 429, 502) keeps the code and message our
  other endpoints give.
- Tool steps: Open WebUI's collapsible `<details type="tool_calls" done="true" ...>` block,
  as Open WebUI itself writes it: `arguments` a JSON object (`{"command_line": "/remember
  …"}`, the command the model wrote), `result` a JSON string (the tool result the model
  read), `<summary>Tool Executed</summary>` inside. Every attribute is HTML-escaped (quotes, `<`, `>`, `&` and newlines), so no result can
  close the attribute or the element: `</details>` in a result stays text.
- `usage`: the provider's token counts do not reach the HTTP layer (the pipeline keeps them
  per pass), so `usage` is an estimate, one token per 4 characters (rounded up) of what
  the client sent plus our system prompt, and of the content returned. README says so.
- A turn that ends on a question for the user (SPEC 8's `/ask_choice`, `/ask_text`, `/confirm`,
  or an approval: the command in a code fence, "reply yes")
  ends with the question as text, its options numbered, and how to answer: an OpenAI client
  has no widget, so its next user message is the answer (`api/v1/widgets.py`). The
  block's `id` is the pending call's `toolCallId`, so a client that resends the history
  (Open WebUI) names the question it answers.
- `finish_reason` is always `"stop"`: an answer cut at `MAX_ANSWER_CHARS` carries its own
  note in the text, and a stopped turn ends like a finished one.
"""

from __future__ import annotations

import html
import json
import math
import re
import time
from typing import Any

from foundation.events import EventName
from live.bus import Event
from pipeline.context import is_tool_role
from tools.interactive import WidgetOutput
from tools.meta import ToolMeta

MODEL_ID = "orchestrator"
DONE_FRAME = "data: [DONE]\n\n"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_error(status: int, body: dict[str, Any]) -> dict[str, Any]:
    """Our `{"error": {"code", "message", "details"?}, ...extra}` in OpenAI's shape (extras kept)."""
    found = body.get("error")
    ours: dict[str, Any] = found if isinstance(found, dict) else {}
    error: dict[str, Any] = {
        "message": str(ours.get("message") or "request failed"),
        "type": _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
        "code": ours.get("code"),
        "param": None,
    }
    if ours.get("details") is not None:
        error["details"] = ours["details"]
    extra = {key: value for key, value in body.items() if key not in ("error", "status")}
    return {"error": error, **extra}


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def attribute(value: str) -> str:
    """An HTML attribute value that cannot end early: `&`, `<`, `>`, quotes and newlines escaped."""
    return html.escape(value, quote=True).replace("\n", "&#10;").replace("\r", "&#13;")


#: One block as `tool_block` writes it (and as Open WebUI resends it in an assistant message's
#: history): every attribute value is escaped, so `[^>]*` cannot stop early and a result cannot
#: hold `</details>`. Open WebUI strips such blocks the same way before its own tasks.
TOOL_BLOCK_RE = re.compile(r'<details type="tool_calls"[^<>]*>\n<summary>[^<>]*</summary>\n</details>\n*')
BLOCK_ID_RE = re.compile(r'\sid="(call_[A-Za-z0-9_]{1,100})"')


def tool_block(message: dict[str, Any]) -> str:
    """One stored tool result (`Message.public()`) as Open WebUI's collapsed tool-call block.

    Its `id` is the call's `toolCallId` where it has one (a question waiting for the user),
    else `call_<message id>`."""
    meta = ToolMeta.model_validate(message.get("meta") or {})
    name = meta.name(str(message["role"]))
    arguments = json.dumps({"command_line": meta.command_line or ""}, ensure_ascii=False)
    result = json.dumps(str(message.get("content") or ""), ensure_ascii=False)
    call_id = meta.tool_call_id or f"call_{int(message['id'])}"
    return (
        f'<details type="tool_calls" done="true" id="{attribute(call_id)}" name="{attribute(name)}" '
        f'arguments="{attribute(arguments)}" result="{attribute(result)}">\n'
        f"<summary>Tool Executed</summary>\n</details>\n\n"
    )


#: Where Open WebUI's temporary chats put a block's `result` in its place (its frontend's
#: `processDetails`): the JSON string of a stored tool result, `"<details>\n<summary>🔧 x_tools…"`.
RESULT_STRING_RE = re.compile(r'"<details>\\n<summary>\U0001f527 [A-Za-z0-9_]{1,64}_tools</summary>')


def strip_tool_blocks(text: str) -> str:
    """An assistant message of a client's history without the tool blocks we wrote into it.

    Both forms go: the block itself, as most clients resend it, and the block's `result`
    value standing in for it, as Open WebUI's temporary chats resend it."""
    text = TOOL_BLOCK_RE.sub("", text)
    decoder = json.JSONDecoder()
    kept, position = [], 0
    for match in RESULT_STRING_RE.finditer(text):
        if match.start() < position:
            continue
        try:
            _, end = decoder.raw_decode(text, match.start())
        except ValueError:
            continue  # not a whole JSON string: the client's own text, kept
        kept.append(text[position : match.start()])
        position = end
    kept.append(text[position:])
    return "".join(kept).strip()


def block_call_ids(text: str) -> list[str]:
    """The `id`s of the tool blocks in a client's assistant message, in order."""
    return [
        match.group(1)
        for block in TOOL_BLOCK_RE.finditer(text)
        for match in [BLOCK_ID_RE.search(block.group())]
        if match is not None
    ]


def pending_widget(message: dict[str, Any]) -> WidgetOutput | None:
    """The widget of a stored question (`Message.public()`) still waiting for the user's answer, else None."""
    if not is_tool_role(str(message.get("role") or "")):
        return None
    return ToolMeta.model_validate(message.get("meta") or {}).pending_widget()


def fenced(text: str) -> str:
    """`text` in a code fence longer than any run of backticks inside it (so it cannot end early)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def widget_prompt(widget: WidgetOutput, meta: ToolMeta | None = None) -> str:
    """How an OpenAI client's user answers a widget: the options, then what to send. An
    approval shows the exact command (its line and body) and asks for yes or no."""
    if widget.widget == "approval":
        line = meta.command_line if meta is not None and meta.command_line else ""
        body = meta.body if meta is not None and meta.body else ""
        command = fenced(f"{line}\n{body}" if body else line)
        return f"\n\n{command}\n\n_Reply **yes** to run it; any other answer declines it._"
    options = widget.options
    if widget.widget == "choice":
        listed = "\n".join(f"{number}. {option}" for number, option in enumerate(options, 1))
        return f"\n\n{listed}\n\n_Reply with one option (its text or its number)._"
    if widget.widget == "confirm":
        return "\n\n_Reply **yes** to confirm or **no** to change it._"
    return "\n\n_Reply with your answer._"


def answer_tail(payload: dict[str, Any], shown: str) -> str:
    """What of the turn's answer the client has not seen, given the answer text `shown` so far.

    A turn ended by a tool (an image) answers that tool's text, already shown as its block.
    A turn ended by a question for the user answers the question, its options and how to
    reply. When a provider restarted its answer (`answer.reset`) the text shown is no
    prefix of the stored answer: the stored answer follows after a rule."""
    reply = str(payload.get("reply") or "")
    messages = payload.get("messages") or []
    widget = pending_widget(messages[-1]) if messages else None
    if widget is not None:
        meta = ToolMeta.model_validate(messages[-1].get("meta") or {})
        return (reply[len(shown) :] if reply.startswith(shown) else reply) + widget_prompt(widget, meta)
    if messages and is_tool_role(messages[-1]["role"]) and messages[-1].get("content") == reply:
        return ""
    if reply.startswith(shown):
        return reply[len(shown) :]
    return "\n\n---\n\n" + reply


def completion_content(payload: dict[str, Any]) -> str:
    """The whole answer of a finished turn: its tool blocks in order, then the answer."""
    blocks = "".join(tool_block(m) for m in payload.get("messages") or [] if is_tool_role(m["role"]))
    return blocks + answer_tail(payload, "")


def usage(prompt_chars: int, content: str) -> dict[str, int]:
    prompt, completion = math.ceil(prompt_chars / 4), estimate_tokens(content)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_completion(payload: dict[str, Any], prompt_chars: int, created: int) -> dict[str, Any]:
    content = completion_content(payload)
    return {
        "id": f"chatcmpl-{payload.get('turn_id', '')}",
        "object": "chat.completion",
        "created": created,
        "model": MODEL_ID,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": usage(prompt_chars, content),
    }


def sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


class ChunkTranslator:
    """The live events of one turn as `chat.completion.chunk` frames, in order.

    Answer deltas go out as they arrive; each stored tool result goes out as its block
    (read back from the database through `load_tool`, since the event carries only its id);
    `done` sends the rest of the answer, the finishing chunk, the usage chunk when asked
    (`stream_options.include_usage`) and `[DONE]`. An `error` before anything was written is
    kept as `failure` (the caller answers it with its real status); after, it is an error frame.
    """

    def __init__(self, turn_id: str, prompt_chars: int, include_usage: bool, load_tool: Any) -> None:
        self.id = f"chatcmpl-{turn_id}"
        self.created = int(time.time())
        self.prompt_chars = prompt_chars
        self.include_usage = include_usage
        self.load_tool = load_tool  # (message id) -> Message.public() dict, or None
        self.content = ""  # everything sent as content
        self.answer = ""  # the answer text sent since the last tool block
        self.holding = False  # a provider restarted its answer: the rest comes from `done`
        self.started = False
        self.failure: tuple[int, dict[str, Any]] | None = None

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        return sse(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": MODEL_ID,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }
        )

    def text(self, piece: str) -> str:
        if not piece:
            return ""
        opening = "" if self.started else self.chunk({"role": "assistant", "content": ""})
        self.started = True
        self.content += piece
        return opening + self.chunk({"content": piece})

    def frames(self, event: Event) -> str:
        data = event.data
        if event.name == EventName.ANSWER_DELTA and not self.holding:
            self.answer += str(data.get("text", ""))
            return self.text(str(data.get("text", "")))
        if event.name == EventName.ANSWER_RESET:
            self.holding = True
        elif event.name == EventName.MESSAGE_STORED and is_tool_role(str(data.get("role", ""))):
            message = self.load_tool(int(data["id"]))
            if message is not None:
                self.answer, self.holding = "", False
                return self.text(tool_block(message))
        elif event.name == EventName.DONE:
            return self.finish(data)
        elif event.name == EventName.ERROR:
            status = int(data.get("status", 500))
            if not self.started:
                self.failure = status, openai_error(status, data)
                return ""
            return sse(openai_error(status, data))
        return ""

    def finish(self, payload: dict[str, Any]) -> str:
        out = self.text(answer_tail(payload, "" if self.holding else self.answer))
        if not self.started:
            out += self.chunk({"role": "assistant", "content": ""})  # an empty answer still opens
            self.started = True
        out += self.chunk({}, "stop")
        if self.include_usage:
            out += sse(
                {
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": MODEL_ID,
                    "choices": [],
                    "usage": usage(self.prompt_chars, self.content),
                }
            )
        return out + DONE_FRAME


def static_chunks(payload: dict[str, Any], prompt_chars: int, include_usage: bool) -> str:
    """A whole answer that ran no turn (an answer to a question that did not fit) as one chunk stream."""
    translator = ChunkTranslator(str(payload.get("turn_id", "")), prompt_chars, include_usage, lambda _id: None)
    blocks = "".join(tool_block(m) for m in payload.get("messages") or [] if is_tool_role(m["role"]))
    return translator.text(blocks) + translator.finish(payload)
