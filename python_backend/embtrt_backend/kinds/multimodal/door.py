"""The text-and-image embedder's front door: one modality per request (Triton gives every input of a request
the same batch size, so a request is texts or images, never a mix):

- TEXT (BYTES): the pooled door (embtrt_backend.doors.pooled, the embedder's door too) over the text tower
  (prompts, truncation, buckets), EMBEDDING (or the vector type asked for) and TOKENS;
- IMAGE (BYTES): encoded files (JPEG, PNG, WebP, GIF's first frame, BMP; embtrt_backend.image_core) through
  the image tower, EMBEDDING and TOKENS (zero per image).

Both inputs are optional in the config; a request with both, or neither, is refused (INVALID_ARG). The
request options (embedding_type, dimensions) apply to either; prompts and truncation to texts only."""

from __future__ import annotations

from ... import InputError
from ...core import Request
from ...doors.base import Item
from ...doors.pooled import PooledDoor
from ...image_core import ImageCore, ImageRequest

INPUTS = ("TEXT", "IMAGE")


class MultimodalDoor(PooledDoor):
    inputs = INPUTS

    def __init__(self, here: str, p: dict[str, str]) -> None:
        super().__init__(here, p)
        self.images = ImageCore.from_folder(here, p)

    def row_bytes(self, arrays):
        """A text's bytes for the long-text lane; an image request is never long text."""
        text = arrays.get("TEXT")
        return [] if text is None else [len(t) for t in text.ravel()]

    def parse(self, arrays, params, asked) -> Item:
        text, image = arrays.get("TEXT"), arrays.get("IMAGE")
        if text is not None and image is not None:
            raise InputError("a request carries TEXT or IMAGE, not both: one modality per request (send the texts "
                             "and the images in two requests)")
        if image is None:
            if text is None:
                raise InputError("the request has no TEXT and no IMAGE input")
            return super().parse(arrays, params, asked)
        files = list(image.ravel())
        if not files:
            raise InputError("IMAGE holds no rows")
        return Item(self.images.prepare(files, self.request_options(params, asked)))

    def run(self, items, encode):
        """Texts through the text core, images through the image core, each item's outcome in order."""
        outs: list = [None] * len(items)
        texts = [i for i, it in enumerate(items) if isinstance(it.work, Request)]
        images = [i for i, it in enumerate(items) if isinstance(it.work, ImageRequest)]
        if texts:
            for i, o in zip(texts, self.core.run([items[i].work for i in texts], encode)):
                outs[i] = o
        if images:
            done = self.images.run([items[i].work for i in images], encode.tower("image"), self.core.options.finish)
            for i, o in zip(images, done):
                outs[i] = o
        return outs
