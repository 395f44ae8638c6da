"""The reranker's front door: (QUERY, DOCUMENT) pairs -> the pair core (embtrt_backend.pairs) ->
SCORES (FP32 [rows, labels]: the model's activation as CrossEncoder.predict applies it, or raw
logits / softmax as the request's `activation` asks) and TOKENS (the tokens scored per pair)."""

from __future__ import annotations

from ... import InputError
from ...pairs import PairCore, PairRequest
from . import KIND as RERANKER
from ...text import decode_texts
from ...doors.base import Door, Item


class RerankerDoor(Door):
    inputs = RERANKER.inputs

    def __init__(self, here: str, p: dict[str, str]) -> None:
        self.core = PairCore.from_folder(here, p)

    def parse(self, arrays, params, asked) -> Item:
        q, d = arrays.get("QUERY"), arrays.get("DOCUMENT")
        if q is None or d is None:
            raise InputError("a reranker request needs QUERY and DOCUMENT (one row per pair)", "QUERY")
        limit = self.core.cfg.max_text_bytes
        queries, documents = decode_texts(q, limit), decode_texts(d, limit)
        return Item(PairRequest(queries, documents, self.core.options(params)))

    def outputs(self, item, out):
        return [("SCORES", out.scores), ("TOKENS", out.tokens.reshape(-1, 1))]
