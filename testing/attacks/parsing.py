"""Untrusted parsing: regular expressions, web pages and images (issue 11, classes 2 and 3; SPEC 12).

Each attack is cheap to send and was expensive to parse: a regex whose nested counted
repetition builds a huge program at compile time, a backtracking regex over 1 MB of files, a
2 MB page of tiny tags, a page nested hundreds of thousands of tags deep, a 1.9 MB `<title>`,
a page of 60,000 links, a PNG that inflates to 108 MB of pixels, and a 27 KB animated WebP of
500 frames of 2000 x 2000 pixels. The `/search_files` attacks call the tool directly
(`POST /tools/search_files`, the same runner as a chat command); the `/open_url` attacks run
in a chat turn whose model reply is the command, so what the turn stored is measured too; the
images are uploaded with a chat message (kept under 64 KB: see serving/protocol.py's head cap).
"""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib

import requests

from testing.attacks import Attack, Outcome, Target
from testing.fake_web import Page

MB = 1024 * 1024
SEARCH_DEADLINE_S = 10.0  # tools/workspace/find_tools.py: SEARCH_WALL_S, the search worker's deadline
PARSE_DEADLINE_S = 10.0  # tools/open_url.py: PARSE_WALL_S, the page parser's deadline
UPLOAD_DEADLINE_S = 2.0  # an upload's inspection is header-only; a generous allowance for the turn

# `regex` expands counted repetitions at compile time: this one asks for 999 x 999 x 9 copies
# (about 2.6 GB and 11 s of compiling), in 22 characters.
COMPILE_BOMB = "(?:(?:x{999}){999}){9}"
BACKTRACKING = r"(\w|\w\w)+$"  # exponential on a run of word characters that ends in a non-word
TRAP_FILE = ("ab" * 24 + "!\n") * 1_000  # 50 KB, every line a trap
TRAP_FILES = 20  # 1 MB in all


def _tool_outcome(response: requests.Response) -> Outcome:
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        note = error.get("code", "") if isinstance(error, dict) else "ok"
    except ValueError:
        note = "not JSON"
    return Outcome(response.status_code, len(response.content), str(note))


def _write_file(target: Target, path: str, content: str) -> None:
    target.post("/tools/write_file", json={"path": path, "content": content}).raise_for_status()


def regex_compile_bomb(target: Target) -> Outcome:
    _write_file(target, "notes.txt", "x marks the spot\n")
    return _tool_outcome(target.post("/tools/search_files", json={"pattern": COMPILE_BOMB}))


def regex_backtracking_big_file(target: Target) -> Outcome:
    for index in range(TRAP_FILES):
        _write_file(target, f"trap/{index}.txt", TRAP_FILE)
    return _tool_outcome(target.post("/tools/search_files", json={"pattern": BACKTRACKING}))


# --------------------------------------------------------------------------- /open_url


def largest_stored(target: Target, session_id: str) -> tuple[int, str]:
    """(bytes of the largest message, content plus meta; the tool result's error code or "ok")."""
    messages = target.get(f"/sessions/{session_id}/messages?limit=200").json().get("messages", [])
    largest = max((len(m["content"].encode()) + len(json.dumps(m.get("meta") or {})) for m in messages), default=0)
    codes = [((m.get("meta") or {}).get("error_code") or "ok") for m in messages if m["role"].endswith("_tools")]
    return largest, (codes[-1] if codes else "no tool result")


def open_page(target: Target, path: str, body: str) -> Outcome:
    """A chat turn whose model opens `path` on the fake web server, then answers."""
    target.web.routes[path] = Page(body)
    target.llm.reset()
    target.llm.queue(f"/open_url {target.web.url(path)}", "Here is the page.")
    response = target.post("/chat", json={"message": "read that page"})
    if response.status_code != 200:
        return Outcome(response.status_code, len(response.content), "turn failed")
    stored, code = largest_stored(target, response.json()["session_id"])
    return Outcome(response.status_code, len(response.content), code, stored)


def tiny_tags(target: Target) -> Outcome:
    return open_page(target, "/tiny", "<html><body>" + "<b>x</b>" * ((2 * MB - 100) // 8) + "</body></html>")


def nested_tags(target: Target) -> Outcome:
    return open_page(target, "/nested", "<html><body>" + "<div>" * 400_000 + "deep" + "</body></html>")


def huge_title(target: Target) -> Outcome:
    title = "T" * 1_900_000
    return open_page(target, "/title", f"<html><head><title>{title}</title></head><body><p>hi</p></body></html>")


def many_links(target: Target) -> Outcome:
    links = "".join(f'<a href="/p{i}">link {i}</a> ' for i in range(60_000))
    return open_page(target, "/links", f"<html><body>{links}</body></html>")


# --------------------------------------------------------------------------- images


def png_bomb(width: int = 6000, height: int = 6000) -> bytes:
    """A valid RGB PNG of `width` x `height` black pixels: ~100 KB that inflate to ~108 MB."""
    compressor = zlib.compressobj(9)
    row = b"\0" * (width * 3 + 1)  # filter byte + pixels
    data = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def animated_webp(width: int, height: int, frames: int) -> bytes:
    """A WebP whose header declares a `width` x `height` canvas and `frames` 1-pixel frames."""
    from PIL import Image  # only the attack that needs it pays for the import

    buffer = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buffer, "WEBP", lossless=True)
    small = buffer.getvalue()
    start = small.index(b"VP8L")
    size = struct.unpack("<I", small[start + 4 : start + 8])[0]
    vp8l = small[start : start + 8 + size + (size & 1)]

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return kind + struct.pack("<I", len(payload)) + payload + (b"\0" if len(payload) & 1 else b"")

    canvas = bytes([0x02, 0, 0, 0]) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    frame = chunk(b"ANMF", bytes(12) + (100).to_bytes(3, "little") + b"\0" + vp8l)
    body = b"WEBP" + chunk(b"VP8X", canvas) + chunk(b"ANIM", bytes(6)) + frame * frames
    return b"RIFF" + struct.pack("<I", len(body)) + body


def upload(target: Target, data: bytes, mime: str) -> Outcome:
    url = f"data:{mime};base64," + base64.b64encode(data).decode()
    target.llm.reset()
    response = target.post("/chat", json={"message": "what is in this picture?", "images": [url]})
    return _tool_outcome(response)


def image_bomb_upload(target: Target) -> Outcome:
    return upload(target, png_bomb(), "image/png")


def animation_bomb_upload(target: Target) -> Outcome:
    return upload(target, animated_webp(2000, 2000, 500), "image/webp")  # 27 KB


ATTACKS: list[Attack] = [
    Attack("search_files: nested counted repetition (compile-time bomb)", regex_compile_bomb, SEARCH_DEADLINE_S),
    Attack("search_files: backtracking regex over 1 MB of files", regex_backtracking_big_file, SEARCH_DEADLINE_S),
    Attack("open_url: 2 MB page of tiny tags, through chat", tiny_tags, PARSE_DEADLINE_S),
    Attack("open_url: 400,000 nested tags, through chat", nested_tags, PARSE_DEADLINE_S),
    Attack("open_url: a 1.9 MB <title>, through chat", huge_title, PARSE_DEADLINE_S),
    Attack("open_url: 60,000 links, through chat", many_links, PARSE_DEADLINE_S),
    Attack("upload: PNG decompression bomb (6000 x 6000)", image_bomb_upload, UPLOAD_DEADLINE_S),
    Attack("upload: animated WebP of 500 frames of 2000 x 2000", animation_bomb_upload, UPLOAD_DEADLINE_S),
]
