"""An image as the clients send it (every kind whose input takes images): an encoded file's bytes, from bytes, a
path or a data URI; an http(s) URL is refused (the client fetches nothing, and neither does the server)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ClientError


def image_bytes(image, row: int = 0) -> bytes:
    """An encoded file from bytes, a path, or a data URI; a ClientError naming the row otherwise."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    if isinstance(image, str) and image.startswith(("data:", "http://", "https://")):
        from embtrt_backend import InputError
        from embtrt_backend.images import from_data_uri

        try:
            return from_data_uri(image, row)
        except InputError as exc:
            raise ClientError(str(exc), "send the file's bytes, its path, or a data:image/...;base64 URI") from None
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        if not path.is_file():
            raise ClientError(f"image {row}: no such file {str(path)!r}", "give an image file's path, bytes or data URI")
        return path.read_bytes()
    raise ClientError(f"image {row}: an image is bytes, a path or a data URI, not {type(image).__name__}",
                      "read the file's bytes (a PIL image: save it to PNG bytes first)")
