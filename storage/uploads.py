"""Images a user sends with a chat turn: checked by content, stored under generated names.

The type is decided by Pillow reading the bytes, never by the file name or the declared
MIME type; size and pixel count are capped before anything is written.

The server never decodes pixels: an upload is only identified from its headers (only the
parsers of the four accepted formats run, `formats=`), PNG chunks are checked by `verify()`
(CRCs, no inflating), and the image goes to the vision provider as it came. So a
decompression bomb (a 100 KB PNG of 6000 x 6000 pixels) costs the server nothing; what stays
bounded is what a decoder elsewhere (the browser, the vision provider) would have to build:
`MAX_IMAGE_PIXELS` per frame, and for animations (APNG, WebP, whose frame count is in their
headers) `MAX_FRAMES` frames and `MAX_IMAGE_PIXELS` over all frames. A GIF's frame count is
not in its header (counting it means decoding every frame), so a GIF is checked by its first
frame only. Files live under
`DATA_DIR/uploads/<user_id>/`, and the stored path is relative to `DATA_DIR`, so a message
row never points outside it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import re
import uuid
from pathlib import Path

from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel

MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_IMAGE_PIXELS = 40_000_000
MAX_FRAMES = 200  # frames of an animated PNG or WebP
MAX_IMAGES_PER_TURN = 4
FORMATS = {
    "PNG": ("image/png", "png"),
    "JPEG": ("image/jpeg", "jpg"),
    "GIF": ("image/gif", "gif"),
    "WEBP": ("image/webp", "webp"),
}
DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<b64>;base64)?,(?P<data>.*)$", re.DOTALL)


class ImageRejected(Exception):
    """An upload is not an acceptable image; the message says why."""


class StoredImage(BaseModel):
    path: str
    mime: str
    bytes: int
    width: int
    height: int


def decode_data_url(value: str) -> bytes:
    match = DATA_URL.match(value.strip())
    if match is None or not match.group("b64"):
        raise ImageRejected("images must be base64 data URLs (data:image/png;base64,...)")
    try:
        return base64.b64decode(match.group("data"), validate=False)
    except (binascii.Error, ValueError) as error:
        raise ImageRejected("image data is not valid base64") from error


def inspect_image(data: bytes) -> tuple[str, str, int, int]:
    """(mime, extension, width, height) read from the bytes themselves."""
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageRejected(f"image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB")
    try:
        with Image.open(io.BytesIO(data), formats=list(FORMATS)) as image:
            width, height = image.size
            kind = image.format or ""
            if width * height > MAX_IMAGE_PIXELS:
                raise ImageRejected(f"image has more than {MAX_IMAGE_PIXELS} pixels")
            frames = int(getattr(image, "n_frames", 1)) if kind in ("PNG", "WEBP") else 1  # from headers
            if frames > MAX_FRAMES:
                raise ImageRejected(f"animation has more than {MAX_FRAMES} frames")
            if width * height * frames > MAX_IMAGE_PIXELS:
                raise ImageRejected(f"animation has more than {MAX_IMAGE_PIXELS} pixels over all its frames")
            image.verify()
    except ImageRejected:
        raise
    except Image.DecompressionBombError as error:
        raise ImageRejected(f"image has more than {MAX_IMAGE_PIXELS} pixels") from error
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise ImageRejected("file is not a readable PNG, JPEG, GIF or WebP image") from error
    if kind not in FORMATS:
        raise ImageRejected(f"image type {kind or 'unknown'} is not accepted (PNG, JPEG, GIF, WebP)")
    mime, extension = FORMATS[kind]
    return mime, extension, width, height


class UploadsUnavailable(Exception):
    """The uploads folder refused the file (full, read-only, gone); nothing of it is kept."""


def save_image(data_dir: str | Path, user_id: int, data: bytes, folder: str = "uploads") -> StoredImage:
    """Store one checked image under the user's folder, whole or not at all (a disk that fills
    up midway leaves no partial file): `UploadsUnavailable` when the disk refuses it."""
    mime, extension, width, height = inspect_image(data)
    relative = Path(folder) / str(int(user_id)) / f"{uuid.uuid4().hex}.{extension}"
    target = Path(data_dir) / relative
    draft = target.with_name(f".{target.name}.part")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        draft.write_bytes(data)
        draft.rename(target)
    except OSError as error:
        with contextlib.suppress(OSError):
            draft.unlink(missing_ok=True)
        raise UploadsUnavailable(f"the image could not be saved: {error.strerror or error}") from error
    return StoredImage(path=relative.as_posix(), mime=mime, bytes=len(data), width=width, height=height)


def load_data_url(data_dir: str | Path, image: StoredImage) -> str | None:
    """The stored image as a data URL for a vision provider; None when the file is gone."""
    root = Path(data_dir).resolve()
    target = (root / image.path).resolve()
    if not target.is_relative_to(root) or not target.is_file():
        return None
    return f"data:{image.mime};base64,{base64.b64encode(target.read_bytes()).decode()}"
