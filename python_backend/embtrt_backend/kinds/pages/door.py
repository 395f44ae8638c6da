"""The page-image retriever's front door: one modality per request (Triton gives every input of a request the same
batch size):

- TEXT (BYTES): queries -> each query's token vectors;
- IMAGE (BYTES): encoded page images (JPEG, PNG, WebP, GIF's first frame, BMP; embtrt_backend.image_core, with
  the image kind's limits and refusals) -> each image's token vectors.

Outputs: TOKEN_EMBEDDINGS (FP32 [items, max count, dim], zero-padded to the request's longest), TOKEN_COUNTS
(INT64 [items, 1]) and TOKENS (each item's positions). Parameters: input_type (query for TEXT; document, passage
or corpus for IMAGE), else refused."""

from __future__ import annotations

from ...doors.base import Door, Item
from ...image_core import ImageRequest, one_modality
from ...text import decode_texts
from ...token_vectors import padded
from . import KIND
from .core import PagesCore, QueryRequest, side
from .qwen import QwenImages

INPUTS = ("TEXT", "IMAGE")


class PagesDoor(Door):
    inputs = INPUTS
    image_input = KIND.image_input

    def __init__(self, here: str, p: dict[str, str]) -> None:
        self.core = PagesCore.from_folder(here, p)

    @property
    def buckets(self) -> tuple[int, ...]:
        return self.core.cfg.buckets or (self.core.cfg.max_query_tokens,)

    def parse(self, arrays, params, asked) -> Item:
        name, rows = one_modality(arrays, self.image_input, "queries and page images go in two requests")
        side(params, name)
        if name == "TEXT":
            return Item(QueryRequest(self.core.query_ids(decode_texts(rows, self.core.cfg.max_text_bytes))))
        return Item(self.core.prepare_images(list(rows.ravel())))

    def run(self, items, encode):
        """Queries together, images together, each item's outcome in order."""
        outs: list = [None] * len(items)
        for cls, run in ((QueryRequest, self.core.run_queries), ((ImageRequest, QwenImages), self.core.run_images)):
            at = [i for i, it in enumerate(items) if isinstance(it.work, cls)]
            if at:
                for i, o in zip(at, run([items[i].work for i in at], encode)):
                    outs[i] = o
        return outs

    def outputs(self, item, out):
        emb, counts = padded(out.vectors, self.core.cfg.dim)
        return [("TOKEN_EMBEDDINGS", emb), ("TOKEN_COUNTS", counts), ("TOKENS", out.tokens.reshape(-1, 1))]
