"""storage/uploads.py: images are identified from their headers only; bombs cost nothing and
what a decoder elsewhere would build is capped (pixels, frames)."""

from __future__ import annotations

import io
import resource

import pytest
from PIL import Image

from storage.uploads import MAX_FRAMES, MAX_IMAGE_PIXELS, ImageRejected, inspect_image
from testing.attacks.parsing import animated_webp, png_bomb


def test_a_png_bomb_is_identified_without_inflating_it() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert inspect_image(png_bomb(6000, 6000))[2:] == (6000, 6000)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 20_000  # KB, not the 108 MB of pixels


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (png_bomb(7000, 7000), f"more than {MAX_IMAGE_PIXELS} pixels"),
        (animated_webp(16383, 16383, 1), f"more than {MAX_IMAGE_PIXELS} pixels"),
        (animated_webp(100, 100, MAX_FRAMES + 1), f"more than {MAX_FRAMES} frames"),
        (animated_webp(2000, 2000, 20), "pixels over all its frames"),
    ],
)
def test_bombs_are_refused_with_a_clear_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ImageRejected, match=reason):
        inspect_image(data)


def test_an_animation_within_the_caps_is_accepted() -> None:
    assert inspect_image(animated_webp(200, 200, 50))[:2] == ("image/webp", "webp")


@pytest.mark.parametrize("kind", ["TIFF", "BMP", "ICO"])
def test_only_the_accepted_formats_are_parsed(kind: str) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buffer, kind)
    with pytest.raises(ImageRejected, match="not a readable PNG, JPEG, GIF or WebP"):
        inspect_image(buffer.getvalue())
