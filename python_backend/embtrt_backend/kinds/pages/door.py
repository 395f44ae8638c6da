"""The page-image retriever's front door: one modality per request (Triton gives every input of a request the same
batch size):

- TEXT (BYTES): queries -> each query's token vectors;
- IMAGE (BYTES): encoded page images (JPEG, PNG, WebP, GIF's first frame, BMP; embtrt_backend.image_core, with
  the image kind's limits and refusals) -> each image's token vectors.

Outputs: TOKEN_EMBEDDINGS (FP32 [items, max count, dim], zero-padded to the request's longest), TOKEN_COUNTS
(INT64 [items, 1]) and TOKENS (each item's positions). Parameters: input_type (query for TEXT; document, passage
or corpus for IMAGE), else refused."""

from __future__ import annotations

from ... import InputError
from ...doors.base import Door, Item
from ...image_core import ImageRequest
from ...text import decode_texts
from ...token_vectors import padded
from .core import PagesCore, QueryRequest, side

INPUTS = ("TEXT", "IMAGE")


class PagesDoor(Door):
    inputs = INPUTS

    def __init__(self, here: str, p: dict[str, str]) -> None:
        self.core = PagesCore.from_folder(here, p)

    @property
    def buckets(self) -> tuple[int, ...]:
        return (self.core.cfg.max_query_tokens,)

    def row_bytes(self, arrays):
        """A text's bytes for the long-text lane; an image request is never long text."""
        text = arrays.get("TEXT")
        return [] if text is None else [len(t) for t in text.ravel()]

    def parse(self, arrays, params, asked) -> Item:
        text, image = arrays.get("TEXT"), arrays.get("IMAGE")
        if text is not None and image is not None:
            raise InputError("a request carries TEXT or IMAGE, not both: queries and page images go in two requests")
        if text is None and image is None:
            raise InputError("the request has no TEXT and no IMAGE input")
        if image is None:
            side(params, "TEXT")
            texts = decode_texts(text, self.core.cfg.max_text_bytes)
            if not texts:
                raise InputError("TEXT holds no rows")
            return Item(QueryRequest(self.core.query_ids(texts)))
        side(params, "IMAGE")
        files = list(image.ravel())
        if not files:
            raise InputError("IMAGE holds no rows")
        return Item(self.core.prepare_images(files))

    def run(self, items, encode):
        """Queries together, images together, each item's outcome in order."""
        outs: list = [None] * len(items)
        for cls, run in ((QueryRequest, self.core.run_queries), (ImageRequest, self.core.run_images)):
            at = [i for i, it in enumerate(items) if isinstance(it.work, cls)]
            if at:
                for i, o in zip(at, run([items[i].work for i in at], encode)):
                    outs[i] = o
        return outs

    def outputs(self, item, out):
        emb, counts = padded(out.vectors, self.core.cfg.dim)
        return [("TOKEN_EMBEDDINGS", emb), ("TOKEN_COUNTS", counts), ("TOKENS", out.tokens.reshape(-1, 1))]
