"""The sparse encoder's front door: TEXT -> the request core (SPLADE pooled in the graph) -> each
row's active dimensions, SPARSE_INDICES (INT64) and SPARSE_VALUES (FP32) [rows, width] padded with
index -1 / value 0 to the request's longest row, and TOKENS per text.

Options (embtrt_backend.sparse_weights.resolve): prompt_name, input_type, truncate, max_active_dims (at most
the graph's K where it was built with --active-dims-in-graph: within_graph). An inference-free
SPLADE's queries (input_type query) take its static query side (StaticQuery) and no encoder run."""

from __future__ import annotations

import os

from ... import InputError
from ...core import Request, RequestCore
from . import KIND as SPARSE
from ...sparse_weights import resolve, sparsify, within_graph
from ...text import decode_texts
from ...doors.base import Door, Item


class SparseDoor(Door):
    inputs = SPARSE.inputs

    def __init__(self, here: str, p: dict[str, str]) -> None:
        self.core = RequestCore.from_folder(here, p)
        self.default_k = int(p.get("max_active_dims") or 0) or None   # the folder's max_active_dims
        self.graph_k = int(p.get("graph_max_active_dims") or 0) or None   # what the graph keeps, if a top-K
        self.static = None   # inference-free SPLADE: queries are weighted tokens, no encoder run
        if p.get("query_route") == "static":
            import numpy as np

            from ...sparse_weights import StaticQuery

            self.static = StaticQuery(os.path.join(here, "query_tokenizer.json"),
                                      np.load(os.path.join(here, "embtrt_query_weights.npy")), int(p["query_max_length"]))

    def parse(self, arrays, params, asked) -> Item:
        texts = decode_texts(arrays["TEXT"], self.core.cfg.max_text_bytes)
        if not texts:
            raise InputError("TEXT holds no rows")
        opts, k, query = resolve(self.core.options, params, self.default_k)
        if query and self.static is not None:
            weights, tokens = self.static.encode(texts, opts.prompt)
            return Item(ready=self._outputs(weights, tokens, k))
        within_graph(k, self.graph_k)
        return Item(Request(texts, None, opts), extra=k)

    def outputs(self, item, out):
        return self._outputs(out.vectors, out.tokens, item.extra)

    @staticmethod
    def _outputs(weights, tokens, k):
        idx, val = sparsify(weights, k)
        return [("SPARSE_INDICES", idx), ("SPARSE_VALUES", val), ("TOKENS", tokens.reshape(-1, 1))]
