"""One multi-vector encoder behind the gateway (`MultiVector`): a request's texts to the model's front
door, which prompts, tokenizes, cuts each side, encodes and compacts each text's vectors itself
(docs/multivector.md), in parts of at most its max batch sent concurrently, with only the outputs the
request needs; the vectors back in input order, and the tokens the front door reports as the usage.

It serves token vectors (TEI's /embed_all, vLLM's /pooling, /v1/encode: scale/gateway/ops/tokens.py) and rank (the
rerank routes): MaxSim of the query's vectors against each document's (MultiVectorEncoder.similarity),
or for bge-m3 FlagEmbedding's compute_score in the mode the request asks (default colbert+sparse+dense,
weights [1, 1, 1] for dense, sparse, colbert). A bge-m3 model also serves the embed routes (its dense
vectors: `embed`) and the sparse routes (its lexical weights: `encode`): its Kind lists those operations
(M3_OPERATIONS), so the registry, the parsers' kind checks and /v1/models see them for it alone."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import MULTIVECTOR, Kind
from embtrt_backend.kinds.multivector.core import MultiVectorCore, unpadded
from embtrt_backend.kinds.multivector.score import M3_MODES, M3_PARTS, m3_score, maxsim
from embtrt_backend.token_vectors import VECTORS

from ...scale.gateway.dialects import DOC_FIELDS, INPUT_FIELDS
from ...scale.gateway.errors import ApiError
from ...scale.gateway.front_door import renamed
from ...scale.gateway.model import GatewayModel
from ...scale.gateway.served import ServedModel
from embtrt_backend.options import ModelOptions
from ...serve import wire

M3_OPERATIONS = ("embed", "embed_sparse")   # what a bge-m3 model serves beyond the kind's own
PART_OUTPUTS = {"dense": ("DENSE",), "lexical": ("SPARSE_INDICES", "SPARSE_VALUES"), "colbert": VECTORS}


class ServedMultiVector(ServedModel):
    """A multi-vector encoder: its layout (colbert | m3), widths and side lengths, and the front door's own
    core (its options resolve a request's side, prompt and truncation; its tokenizer counts a large request)."""

    def __init__(self, repo: Path) -> None:
        super().__init__(repo)
        self.core = MultiVectorCore.from_folder(str(self.folder), self.door)
        self.mv = self.core.mv
        # bge-m3's dense vector and lexical weights behind the embed and sparse routes: their request options
        # (no prompts; the dense vector normalised; widths; float and binary types, no calibration)
        self.options = ModelOptions(dim=self.mv.hidden or self.mv.dim, normalize=True, prompts={})
        self.vocab_size = self.core.tokenizer.get_vocab_size(with_added_tokens=True)

    def token_of(self, index: int) -> str | None:
        """A token id's string (the model's tokenizer): /v1/sparse's return_tokens."""
        return self.core.tokenizer.id_to_token(index)


@dataclass(frozen=True)
class MultiVectorModel:
    """What parsing a request needs of one served multi-vector model, for each operation it serves: the
    rerank parsers read num_labels and max_text_bytes (its one score orders the documents); bge-m3's embed
    and sparse routes read options (its dense vector's request options), vocab_size, max_len, route and
    token_ids, as an embedder's and a sparse encoder's."""

    layout: str
    dim: int
    hidden: int
    prompts: dict
    max_text_bytes: int
    options: ModelOptions
    vocab_size: int
    max_len: int
    num_labels: int = 1
    route: str = "frontdoor"
    token_ids: bool = False


@dataclass(frozen=True)
class Ask:
    """One call's outputs (TOKENS last)."""

    outputs: tuple[str, ...]


@dataclass
class Encoded:
    """A request's texts, encoded: each output asked for, in input order."""

    vectors: list[np.ndarray] | None = None
    dense: np.ndarray | None = None
    sparse: list[tuple[np.ndarray, np.ndarray]] | None = None
    tokens: int = 0


class MultiVector(GatewayModel):
    kind, does, value = MULTIVECTOR, "encodes every text", "vector"
    outputs = (*VECTORS, "TOKENS")
    probe = (Ask((*VECTORS, "TOKENS")), ["embtrt readiness probe"])
    served_as = ServedMultiVector

    @property
    def schema(self) -> MultiVectorModel:
        mv = self.served.mv
        s = self.served
        return MultiVectorModel(mv.layout, mv.dim, mv.hidden, dict(s.core.prompts), s.max_text_bytes, s.options,
                                s.vocab_size, s.max_len)

    def as_built(self) -> Kind:
        """bge-m3 also serves its dense vector and lexical weights on the embed and sparse routes."""
        if self.served.mv.layout == "m3":
            return replace(MULTIVECTOR, operations=(*MULTIVECTOR.operations, *M3_OPERATIONS))
        return MULTIVECTOR

    async def embed(self, texts: list[str] | None, ids: list[list[int]] | None, opts=None) -> tuple[np.ndarray, int]:
        """bge-m3 on the embed routes: its dense vectors (BGEM3FlagModel.encode's dense_vecs, normalised), with
        the request's width and vector type (float, binary, ubinary), in input order; the tokens."""
        if texts is None:
            raise ApiError(400, f"{self.served.name} is {self.kind.label}: it embeds texts, not token ids", param="input")
        opts = opts if opts is not None else self.served.options.default
        got = await self.encode_texts(texts, "document", ("DENSE",), "input", truncate=opts.truncate)
        assert got.dense is not None
        return self.served.options.finish(got.dense, opts), got.tokens

    async def encode(self, req) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
        """bge-m3 on the sparse routes (a SparseRequest): each text's lexical weights (token ids ascending,
        BGEM3FlagModel.encode's lexical_weights), its max_active_dims largest kept; the tokens."""
        got = await self.encode_texts(req.texts, "document", ("SPARSE_INDICES", "SPARSE_VALUES"), INPUT_FIELDS[req.api],
                                      truncate=req.options.truncate)
        assert got.sparse is not None
        k = req.max_active_dims
        rows = got.sparse if k is None else [keep_largest(i, v, k) for i, v in got.sparse]
        return rows, got.tokens

    def asked(self, how: Ask) -> tuple[str, ...]:
        return how.outputs

    def inputs(self, texts: list[str], _how) -> list:
        return [wire.text_input(texts)]

    def unpack(self, texts: list[str], outs: tuple) -> tuple:
        return outs

    def finite(self, rows: tuple) -> bool:
        return all(np.all(np.isfinite(a)) for a in rows if a.dtype.kind == "f")

    def side_length(self, side: str) -> int:
        mv = self.served.mv
        return mv.query_length if side == "query" else mv.document_length

    async def _bounds(self, texts: list[str], side: str, params: dict, field: str, vectors: bool) -> list[int]:
        """The caps before the call -> each text's token count (or its bound), to order the texts by. Characters;
        tokens (--max-request-tokens); and where token vectors come back, the float32 bytes of the padded parts
        the gateway receives (--max-vector-bytes; the texts go up longest first, so a part's padding is its
        own). Bounded without tokenizing first (a text is at most its side's length, a token covers at least
        one UTF-8 byte, an expanded query is exactly its length); where that bound does not prove the request
        under a cap, the texts are tokenized with the front door's own tokenizer, off the event loop, and counted."""
        a, mv, s = self.admission, self.served.mv, self.served
        a.check_count(sum(map(len, texts)), field)
        try:
            opts = s.core.options(params)
        except ValueError as exc:   # InputError: the front door's own words, naming the parameter
            raise ApiError(400, str(exc), param=getattr(exc, "param", None) or field) from None
        length = self.side_length(side)
        expanded = side == "query" and mv.expansion_id >= 0
        extra = 4 + 4 * len(opts.prompt)
        n = [min(4 * len(t) + extra, length) for t in texts]

        def padded(counts: list[int]) -> int:   # parts of the front door's max batch, longest first
            rows = sorted((length if expanded else c for c in counts), reverse=True)
            mb = max(1, s.max_batch_size)
            return sum(len(rows[i:i + mb]) * rows[i] for i in range(0, len(rows), mb)) * 4 * mv.dim

        limit = self.cfg.max_vector_bytes
        if sum(n) <= a.cfg.max_request_tokens and (not vectors or padded(n) <= limit):
            return n
        cut = s.core.cutter(length, opts.truncate)
        prompted = [opts.prompt + t for t in texts]
        n = await a.offload(sum(map(len, texts)),
                            lambda: [min(len(e.ids), length) for e in cut.encode_batch(prompted, add_special_tokens=True)])
        a.check_tokens(sum(n), field)
        total = padded(n)
        if vectors and total > limit:
            raise ApiError(413, f"the token vectors of this request are up to {total} bytes (float32); this gateway "
                           f"answers at most {limit} per request (--max-vector-bytes): send fewer or shorter texts",
                           param=field, code="request_too_large")
        return n

    async def encode_texts(self, texts: list[str], side: str, outputs: tuple[str, ...], field: str,
                           prompt_name: str | None = None, truncate: str | None = None) -> Encoded:
        """Texts on one side (query | document) -> the outputs asked for (a subset of M3_ALL), in input order.
        The texts go up longest first (parts of similar lengths: little padding), a refusal names the
        request's own item."""
        params = {"input_type": side, **({"prompt_name": prompt_name} if prompt_name else {}),
                  **({"truncate": truncate} if truncate else {})}
        if self.served.mv.layout != "m3" and ("DENSE" in outputs or "SPARSE_INDICES" in outputs):
            raise ApiError(400, f"{self.served.name} is a ColBERT model: it has token vectors only", param=field)
        n = await self._bounds(texts, side, params, field, "TOKEN_EMBEDDINGS" in outputs)
        order = sorted(range(len(texts)), key=lambda i: -n[i])
        try:
            parts, tokens = await self.send([texts[i] for i in order], Ask((*outputs, "TOKENS")), params, field)
        except ApiError as exc:
            raise renamed(exc, field, order) from None
        vectors: list[np.ndarray] = []
        dense: list[np.ndarray] = []
        sparse: list[tuple[np.ndarray, np.ndarray]] = []
        for got in parts:
            named = dict(zip(outputs, got))
            self._check(named, len(got[-1]) if got else 0)
            if "TOKEN_EMBEDDINGS" in named:
                vectors += unpadded(named["TOKEN_EMBEDDINGS"], named["TOKEN_COUNTS"])
            if "DENSE" in named:
                dense += list(named["DENSE"])
            if "SPARSE_INDICES" in named:
                idx, val = named["SPARSE_INDICES"], named["SPARSE_VALUES"]
                widths = (idx >= 0).sum(axis=1).tolist()
                sparse += [(i[:w], v[:w]) for i, v, w in zip(idx, val, widths)]
        back = np.argsort(order)   # sorted position of each input
        pick = lambda rows: [rows[int(k)] for k in back] if rows else None
        d = pick(dense)
        return Encoded(pick(vectors), None if d is None else np.stack(d), pick(sparse), tokens)

    def _check(self, named: dict, rows: int) -> None:
        emb = named.get("TOKEN_EMBEDDINGS")
        if emb is not None and (emb.ndim != 3 or emb.shape[2] != self.served.mv.dim or len(emb) != rows):
            raise ApiError(502, f"{self.served.name}'s front door answered TOKEN_EMBEDDINGS {list(emb.shape)} for {rows} "
                           f"texts; expected [{rows}, tokens, {self.served.mv.dim}]", type_="server_error")

    async def rerank(self, req) -> tuple[np.ndarray, int]:
        """The rerank routes: each document's score against the query, in document order. ColBERT: MaxSim (or
        meanmaxsim, the model's similarity) of encode_query's vectors against encode_document's; bge-m3:
        compute_score's `mode` (default colbert+sparse+dense) with the request's `weights` ([dense, sparse,
        colbert], default [1, 1, 1]), only the outputs the mode reads asked for. Activation flags do not apply
        (these are not a classifier's logits). The request's truncation cuts the documents (truncate false: an
        over-long one refused; truncation_direction left: cut at the start); the query is always cut at its
        length, as encode_query cuts it."""
        mode, weights = scoring(self.served.mv.layout, getattr(req, "scoring", None) or {})
        q_cut = "START" if getattr(req, "truncation_direction", "right") == "left" else None
        field = DOC_FIELDS.get(req.api, "documents")
        q, d = await self._sides([req.query], req.documents, mode, "query", field, q_cut, q_cut if req.truncate else "NONE")
        mean = self.served.mv.similarity == "meanmaxsim"
        scores = [pair_score(q, 0, d, j, mode, weights, mean) for j in range(len(req.documents))]
        return np.asarray(scores, dtype=np.float32), q.tokens + d.tokens

    async def _sides(self, queries: list[str], docs: list[str], mode: str | None, qfield: str, dfield: str,
                     q_cut: str | None, d_cut: str | None) -> tuple[Encoded, Encoded]:
        """Queries and documents encoded concurrently, with the outputs `mode` reads (None: MaxSim's vectors)."""
        outputs = VECTORS if mode is None else tuple(o for part in M3_PARTS[mode] for o in PART_OUTPUTS[part])
        q, d = await asyncio.gather(self.encode_texts(queries, "query", outputs, qfield, truncate=q_cut),
                                    self.encode_texts(docs, "document", outputs, dfield, truncate=d_cut))
        return q, d

    async def score_pairs(self, pairs: list[tuple[str, str]], activation: str, field: str, truncate: bool = True,
                          truncation_direction: str = "right") -> tuple[np.ndarray, int]:
        """vLLM's /score: (query, document) pairs -> each pair's score [pairs, 1] as rerank scores it, each
        distinct text encoded once per side (a refusal names the first pair holding that text). `activation`
        does not apply to these scores."""
        queries, docs = list(dict.fromkeys(q for q, _ in pairs)), list(dict.fromkeys(d for _, d in pairs))
        qi, di = {t: i for i, t in enumerate(queries)}, {t: i for i, t in enumerate(docs)}
        first_q = [next(k for k, (a, _) in enumerate(pairs) if a == t) for t in queries]
        first_d = [next(k for k, (_, b) in enumerate(pairs) if b == t) for t in docs]
        mode, weights = scoring(self.served.mv.layout, {})
        cut = "START" if truncation_direction == "left" else None
        try:
            q, d = await self._sides(queries, docs, mode, "query", "document", cut, cut if truncate else "NONE")
        except ApiError as exc:
            raise renamed(renamed(exc, "query", first_q, field), "document", first_d, field) from None
        mean = self.served.mv.similarity == "meanmaxsim"
        out = [pair_score(q, qi[a], d, di[b], mode, weights, mean) for a, b in pairs]
        return np.asarray(out, dtype=np.float32).reshape(-1, 1), q.tokens + d.tokens

    def tei_type(self) -> dict:
        return {"embedding": {"pooling": f"multi-vector ({self.served.mv.layout})"}}

    def facts(self) -> dict:
        mv = self.served.mv
        return {"layout": mv.layout, "dim": mv.dim, **({"dense_dim": mv.hidden} if mv.layout == "m3" else {}),
                "similarity": mv.similarity, "query_length": mv.query_length, "document_length": mv.document_length,
                "prompts": self.served.core.prompts}


def keep_largest(ids: np.ndarray, weights: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A text's k largest lexical weights, token ids ascending."""
    if len(ids) <= k:
        return ids, weights
    keep = np.sort(np.argsort(-weights, kind="stable")[:k])
    return ids[keep], weights[keep]


def pair_score(q: Encoded, i: int, d: Encoded, j: int, mode: str | None, weights: tuple[float, float, float],
               mean: bool) -> float:
    """Query text i against document text j: MaxSim (mode None; mean: meanmaxsim), or bge-m3's score in `mode`
    (from the parts it reads, which the call asked for)."""
    if mode is None:
        assert q.vectors is not None and d.vectors is not None   # MaxSim's call asks for the token vectors
        return maxsim(q.vectors[i], d.vectors[j], mean)
    side = lambda e, k: {"dense": None if e.dense is None else e.dense[k], "lexical": None if e.sparse is None else e.sparse[k],
                         "colbert": None if e.vectors is None else e.vectors[k]}
    return m3_score(mode, side(q, i), side(d, j), weights)


def scoring(layout: str, raw: dict) -> tuple[str | None, tuple[float, float, float]]:
    """A rank request's `mode` and `weights` (bge-m3 only) -> (mode, or None for ColBERT's MaxSim; weights)."""
    if layout != "m3":
        for key in ("mode", "weights"):
            if raw.get(key) is not None:
                raise ApiError(400, f"{key} applies to bge-m3 models (this model ranks by MaxSim)", param=key)
        return None, (1.0, 1.0, 1.0)
    mode = raw.get("mode", "colbert+sparse+dense")
    if mode not in M3_MODES:
        raise ApiError(400, f"mode must be one of {', '.join(M3_MODES)}, got {mode!r}", param="mode")
    w = raw.get("weights", [1.0, 1.0, 1.0])
    if not isinstance(w, list) or len(w) != 3 or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                       and x >= 0 for x in w):
        raise ApiError(400, "weights must be 3 numbers >= 0 (dense, sparse, colbert)", param="weights")
    used = dict(zip(("dense", "lexical", "colbert"), w))
    if sum(used[p] for p in M3_PARTS[mode]) <= 0:
        raise ApiError(400, f"weights: the weights of {mode}'s parts ({', '.join(M3_PARTS[mode])}) are all 0",
                       param="weights")
    return mode, (float(w[0]), float(w[1]), float(w[2]))
