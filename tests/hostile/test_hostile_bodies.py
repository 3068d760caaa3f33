"""Large `POST /chat` bodies on the real server: what one costs in memory.

A multipart upload's files are spooled to temporary files by Werkzeug's form parser and read
one image at a time (`api/chat.py`); a JSON body, read and decoded whole, is capped lower
(`api/bodies.py`). Before, a 48 MiB body of data URLs cost 139 MB at its peak and left 60 MB
resident.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator

import pytest
import requests
from PIL import Image

from api.bodies import MAX_JSON_IMAGES_BYTES
from storage.uploads import MAX_IMAGE_BYTES, MAX_IMAGES_PER_TURN
from testing.hostile import PeakMemory, ServerUnderTest, running_server

pytestmark = pytest.mark.slow

MB = 1024 * 1024
SIDE = 1800  # 1800 x 1900 RGB noise: a PNG of about 9.8 MiB (noise does not compress)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerUnderTest]:
    with running_server(tmp_path_factory.mktemp("bodies"), {"RATE_LIMITS": "turns=off,sessions=off"}) as running:
        yield running


def noise_png() -> bytes:
    image = Image.frombytes("RGB", (SIDE, 1900), os.urandom(SIDE * 1900 * 3))
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def test_a_multipart_upload_of_four_full_size_images_is_never_held_whole(server: ServerUnderTest):
    images = [noise_png() for _ in range(MAX_IMAGES_PER_TURN)]
    assert all(8 * MB < len(image) <= MAX_IMAGE_BYTES for image in images)
    body_mb = sum(map(len, images)) / MB
    auth = server.auth(server.admin_token)
    files = [("images[]", (f"{index}.png", image, "image/png")) for index, image in enumerate(images)]
    for _ in range(2):  # every image read and checked; the unknown session answers 404 before a turn
        with PeakMemory(server) as memory:
            answer = requests.post(
                f"{server.base}/chat",
                data={"message": "look", "session_id": "nope"},
                files=files,
                headers=auth,
                timeout=60,
            )
        assert answer.status_code == 404, answer.text
        assert memory.added_mb < body_mb / 2, f"{memory.added_mb:.0f} MB added for a body of {body_mb:.0f} MiB"


def test_a_json_body_of_data_urls_is_capped_lower_and_refused_unread(server: ServerUnderTest):
    body = json.dumps({"message": "look", "images": ["data:image/png;base64," + "A" * (11 * MB)] * 4}).encode()
    auth = {**server.auth(server.admin_token), "Content-Type": "application/json"}
    with PeakMemory(server) as memory:
        answer = requests.post(f"{server.base}/chat", data=body, headers=auth, timeout=60)
    assert answer.status_code == 413, answer.text
    assert answer.json()["error"]["code"] == "payload_too_large"
    assert memory.added_mb < len(body) / MB / 10, f"{memory.added_mb:.0f} MB added"
    just_over = b'{"message": "' + b"x" * MAX_JSON_IMAGES_BYTES + b'"}'
    assert requests.post(f"{server.base}/chat", data=just_over, headers=auth, timeout=60).status_code == 413


def test_a_multipart_body_over_the_app_limit_is_refused_unread(server: ServerUnderTest):
    files = [("images[]", ("big.png", b"\0" * (49 * MB), "image/png"))]
    with PeakMemory(server) as memory:
        answer = requests.post(
            f"{server.base}/chat",
            data={"message": "look"},
            files=files,
            headers=server.auth(server.admin_token),
            timeout=60,
        )
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "payload_too_large", answer.text
    assert memory.added_mb < 5, f"{memory.added_mb:.0f} MB added"
