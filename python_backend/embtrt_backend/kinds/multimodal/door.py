"""The text-and-image embedder's front door: one modality per request (Triton gives every input of a request
the same batch size, so a request is texts or images, never a mix):

- TEXT (BYTES): the pooled door (embtrt_backend.doors.pooled, the embedder's door too) over the text tower
  (prompts, truncation, buckets), EMBEDDING (or the vector type asked for) and TOKENS;
- IMAGE (BYTES): encoded files (JPEG, PNG, WebP, GIF's first frame, BMP; embtrt_backend.image_core) through
  the image tower, EMBEDDING and TOKENS (zero per image).

Both inputs are optional in the config; a request with both, or neither, is refused (INVALID_ARG). The
request options (embedding_type, dimensions) apply to either; prompts and truncation to texts only."""

from __future__ import annotations

from ...core import Request
from ...doors.base import Item
from ...doors.pooled import PooledDoor
from ...image_core import ImageCore, ImageRequest, one_modality
from . import KIND

INPUTS = ("TEXT", "IMAGE")


class MultimodalDoor(PooledDoor):
    inputs = INPUTS
    image_input = KIND.image_input

    def __init__(self, here: str, p: dict[str, str]) -> None:
        super().__init__(here, p)
        self.images = ImageCore.from_folder(here, p)

    def parse(self, arrays, params, asked) -> Item:
        name, rows = one_modality(arrays, self.image_input, "one modality per request (send the texts and the images in "
                                  "two requests)")
        if name == "TEXT":
            return super().parse(arrays, params, asked)
        return Item(self.images.prepare(list(rows.ravel()), self.request_options(params, asked)))

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
