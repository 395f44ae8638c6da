"""The sparse-weights head's request options and its output (every kind with the head: SPLADE, bge-m3's lexical
weights): the request core's [rows, vocab] weights
(SPLADE, pooled in the graph) -> each row's active dimensions (indices, weights), as
SparseEncoder.encode_query / encode_document return them.

Options: prompt_name / input_type as for embedders, except that input_type needs no prompt
(query and document run the same model unless the model has prompts for them: encode_query
then prepends its query prompt); truncate END / START / NONE; max_active_dims K keeps each row's
K largest weights (encode's max_active_dims). Widths and vector types do not apply.
"""

from __future__ import annotations

import numpy as np

from . import InputError
from .options import INPUT_TYPES, ModelOptions, RequestOptions

NOT_SPARSE = ("dimensions", "embedding_type")


def resolve(options: ModelOptions, raw: dict, default_k: int | None = None) -> tuple[RequestOptions, int | None, bool]:
    """A request's parameters -> (its options, max_active_dims (the request's, else the model's
    `default_k`, else None: every active dimension), whether it is a query: the static query side
    of an inference-free SPLADE serves those)."""
    raw = dict(raw)
    for name in NOT_SPARSE:
        if name in raw:
            raise InputError(f"{name} does not apply to a sparse encoder (its output is one weight per vocabulary "
                             "token; max_active_dims keeps the largest K)", name)
    k = raw.pop("max_active_dims", None)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise InputError(f"invalid max_active_dims {k!r}: must be an integer >= 1", "max_active_dims")
    if k is None:
        k = default_k
    it = raw.pop("input_type", None)
    query = isinstance(it, str) and it.lower() == "query"
    if it is not None:
        if not isinstance(it, str) or it.lower() not in INPUT_TYPES:
            raise InputError(f"invalid input_type {it!r}: allowed query, passage, document", "input_type")
        named = [p for p in INPUT_TYPES[it.lower()] if p in options.prompts]
        if named and "prompt_name" not in raw:
            raw["prompt_name"] = named[0]
    return options.resolve(raw), k, query


def within_graph(k: int | None, graph_k: int | None) -> None:
    """A graph built with --active-dims-in-graph keeps only `graph_k` weights per text: a request
    (through the encoder) asking for more, or for all, is refused."""
    if graph_k and (k is None or k > graph_k):
        raise InputError(f"max_active_dims {k if k is not None else 'all'}: this deployment's graph keeps each text's "
                         f"{graph_k} largest weights (built with --active-dims-in-graph); ask for at most {graph_k}",
                         "max_active_dims")


def keep_largest(weights: np.ndarray, max_active: int | None) -> np.ndarray:
    """[rows, vocab] float32 with each row's K largest weights kept and the rest 0 (None: all)."""
    w = np.asarray(weights, dtype=np.float32)
    if max_active is None or max_active >= w.shape[1]:
        return w
    keep = np.argpartition(-w, max_active - 1, axis=1)[:, :max_active]
    mask = np.zeros_like(w, dtype=bool)
    np.put_along_axis(mask, keep, True, axis=1)
    return np.where(mask, w, np.float32(0.0))


def sparsify(weights: np.ndarray, max_active: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """[rows, vocab] -> (indices int64 [rows, width], values float32 [rows, width]): each row's
    nonzero weights by index ascending (the K largest with max_active), padded with index -1 and
    value 0 to the longest row of the request."""
    w = keep_largest(weights, max_active)
    rows = [np.flatnonzero(r > 0) for r in w]
    width = max((len(r) for r in rows), default=0)
    idx = np.full((len(rows), width), -1, dtype=np.int64)
    val = np.zeros((len(rows), width), dtype=np.float32)
    for i, r in enumerate(rows):
        idx[i, :len(r)] = r
        val[i, :len(r)] = w[i, r]
    return idx, val


def densify(indices: np.ndarray, values: np.ndarray, vocab: int) -> np.ndarray:
    """The inverse of sparsify: [rows, vocab] float32 (padding, index -1, dropped)."""
    out = np.zeros((len(indices), vocab), dtype=np.float32)
    for i, (ix, v) in enumerate(zip(indices, values)):
        keep = ix >= 0
        out[i, ix[keep]] = v[keep]
    return out


class StaticQuery:
    """The query side of an inference-free SPLADE (SparseStaticEmbedding): no encoder, each
    query token present (tokenized without special tokens, cut at the max length) gets its
    learned weight, as sentence-transformers' forward does (presence x weight)."""

    def __init__(self, tokenizer_json: str, weights: np.ndarray, max_length: int) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(tokenizer_json)
        self.tok.no_padding()
        self.tok.enable_truncation(max_length=int(max_length))
        self.weights = np.asarray(weights, dtype=np.float32)

    def encode(self, texts: list[str], prompt: str = "") -> tuple[np.ndarray, np.ndarray]:
        """-> (weights [texts, vocab], tokens per text)."""
        encs = self.tok.encode_batch([prompt + t for t in texts] if prompt else texts, add_special_tokens=False)
        out = np.zeros((len(texts), self.weights.shape[0]), dtype=np.float32)
        for i, e in enumerate(encs):
            ids = np.unique(np.asarray(e.ids, dtype=np.int64))
            out[i, ids] = self.weights[ids]
        return out, np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
