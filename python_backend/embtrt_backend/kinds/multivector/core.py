"""The multi-vector encoder's request core: texts -> each text's token vectors, as
MultiVectorEncoder.encode_query / encode_document return them (layout `colbert`), or bge-m3's three
outputs from one encoder pass, as FlagEmbedding's BGEM3FlagModel.encode returns them (layout `m3`).

On the one core of every kind (embtrt_backend.batch_core.BatchCore), it writes:
    tokenize(requests): the side's prompt prepended (input_type query / document), the text cut at
        the side's length (a ColBERT query at the expansion length, a document at its own); a ColBERT
        query padded with the expansion token ([MASK]) to exactly that length, those positions run
        but not attended (Rows.attend), as sentence-transformers' query expansion does;
    after: the encoder's [rows, length, width] output -> each row's positions (a list of arrays);
    collect: rows of different lengths, kept as a list;
    result: each text's scoring mask applied, compacted in position order: a query keeps every
        position, a document drops its skiplisted ids (the attention mask minus the skiplist, [CLS]
        and [SEP] kept); for bge-m3: the ColBERT vectors of every position after <s>, the dense
        vector (<s>'s, carried at position 0 of the graph's output), the lexical weights (the max per
        token id of relu(sparse head), special ids and weights <= 0 dropped).

The graph's output per position (embtrt_backend.torch_encoder.multivector_head): colbert: the
normalised projection [dim]; m3: [C + 1] with C = max(colbert dim, hidden): position 0 holds the
normalised dense vector, every other position its normalised ColBERT vector, and the last column the
sparse weight. Plain numpy (+ tokenizers), tested without Triton against the references.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from ... import InputError
from ...batch_core import Rows, TokenRows
from ...core import CoreConfig
from ...options import TRITON_PARAMETERS, TRUNCATE
from ...text import TextTokenizer
from ...token_vectors import SIDES, padded, unpadded  # noqa: F401 (the head's layout, read here by the door and clients)

DOCUMENT_PROMPTS = ("document", "passage", "corpus")   # encode_document's prompt: the first the model has
KNOWN = ("input_type", "prompt_name", "truncate")
DEFAULT_MAX_VECTOR_BYTES = 256 << 20   # a request's token vectors, fp32, padded: the front door's bound


@dataclass(frozen=True)
class MultiVectorConfig:
    layout: str                      # colbert | m3
    dim: int                         # a token vector's width
    hidden: int = 0                  # m3: the dense vector's width
    query_length: int = 32           # a query's tokens: the expansion length where queries are expanded
    document_length: int = 512
    expansion_id: int = -1           # the token queries are padded with (-1: no expansion)
    expansion_attend: bool = False   # the expansion positions are attended (query_expansion's `attend`)
    skiplist: frozenset = frozenset()    # ids dropped from the scoring mask
    skip_queries: bool = False       # the skiplist applies to queries too (skiplist_tasks)
    drop_ids: frozenset = frozenset()    # m3: ids without a lexical weight (cls, eos, pad, unk)
    similarity: str = "maxsim"       # maxsim | meanmaxsim (MultiVectorEncoder's similarity_fn_name)
    max_vector_bytes: int = DEFAULT_MAX_VECTOR_BYTES

    @classmethod
    def from_parameters(cls, p: dict[str, str]) -> "MultiVectorConfig":
        ids = lambda key: frozenset(int(x) for x in p.get(key, "").split(",") if x)
        return cls(layout=p["mv_layout"], dim=int(p["mv_dim"]), hidden=int(p.get("mv_hidden") or 0),
                   query_length=int(p["mv_query_length"]), document_length=int(p["mv_document_length"]),
                   expansion_id=int(p.get("mv_expansion_id", "-1")), expansion_attend=p.get("mv_expansion_attend") == "true",
                   skiplist=ids("mv_skiplist"),
                   skip_queries=p.get("mv_skip_queries") == "true", drop_ids=ids("mv_drop_ids"),
                   similarity=p.get("mv_similarity", "maxsim"),
                   max_vector_bytes=int(p.get("max_vector_bytes") or DEFAULT_MAX_VECTOR_BYTES))

    @property
    def m3(self) -> bool:
        return self.layout == "m3"

    @property
    def channel(self) -> int:
        """m3: the column of the sparse weight (C = max(colbert dim, hidden))."""
        return max(self.dim, self.hidden)


@dataclass(frozen=True)
class MultiVectorOptions:
    side: str = "document"          # query | document: encode_query or encode_document
    prompt: str = ""
    truncate: str | None = None     # END (default) | START | NONE: an over-long text refused

    @property
    def query(self) -> bool:
        return self.side == "query"


def resolve(raw: dict, prompts: dict[str, str]) -> MultiVectorOptions:
    """A request's parameters -> its options: input_type query | document (passage, corpus: document;
    default document), prompt_name (one of the model's prompts, over the side's own), truncate. An
    unknown name or a bad value is an InputError naming it."""
    unknown = sorted(k for k in raw if k not in KNOWN and k not in TRITON_PARAMETERS)
    if unknown:
        raise InputError(f"unknown request parameter {unknown[0]!r}: a multi-vector encoder takes "
                         f"{', '.join(KNOWN)}", unknown[0])
    it = raw.get("input_type", "document")
    if not isinstance(it, str) or it.lower() not in SIDES:
        raise InputError(f"invalid input_type {it!r}: allowed query, document (passage, corpus)", "input_type")
    side = SIDES[it.lower()]
    name = raw.get("prompt_name")
    if name is not None:
        if not isinstance(name, str) or name not in prompts:
            raise InputError(f"unknown prompt_name {name!r}: this model's prompts are "
                             f"{', '.join(sorted(prompts)) or 'none'}", "prompt_name")
        prompt = prompts[name]
    elif side == "query":
        prompt = prompts.get("query") or ""
    else:
        prompt = next((prompts[n] for n in DOCUMENT_PROMPTS if n in prompts), "") or ""
    truncate = raw.get("truncate")
    if truncate is not None:
        if not isinstance(truncate, str) or truncate.upper() not in TRUNCATE:
            raise InputError(f"invalid truncate {truncate!r}: allowed END, START, NONE", "truncate")
        truncate = truncate.upper()
    return MultiVectorOptions(side, prompt, truncate)


@dataclass
class MultiVectorRequest:
    texts: list[str]
    options: MultiVectorOptions = MultiVectorOptions()
    vectors: bool = True    # its token vectors are returned (max_vector_bytes bounds them); False: dense / lexical only


@dataclass
class MultiVectorOutcome:
    vectors: list[np.ndarray] | None = None    # per text: [count, dim] float32 in position order
    tokens: np.ndarray | None = None           # per text: its tokens (prompt included, expansion not)
    dense: np.ndarray | None = None            # m3: [texts, hidden]
    sparse: list[tuple[np.ndarray, np.ndarray]] | None = None   # m3: per text (token ids ascending, weights)
    error: Exception | None = None


class MultiVectorCore(TokenRows):
    outcome = MultiVectorOutcome

    def __init__(self, cfg: CoreConfig, mv: MultiVectorConfig, padder: TextTokenizer, prompts: dict[str, str]) -> None:
        self.cfg, self.mv, self._padder, self.prompts = cfg, mv, padder, prompts
        self._cut: dict[tuple[int, str], object] = {}
        self._skip = np.fromiter(sorted(mv.skiplist), dtype=np.int64) if mv.skiplist else None
        self._drop = np.fromiter(sorted(mv.drop_ids), dtype=np.int64)

    @classmethod
    def from_folder(cls, folder: str, p: dict[str, str]) -> "MultiVectorCore":
        tok = TextTokenizer(os.path.join(folder, "tokenizer.json"), int(p["max_seq_length"]), int(p["pad_id"]))
        return cls(CoreConfig.from_parameters(p), MultiVectorConfig.from_parameters(p), tok,
                   json.loads(p.get("prompts", "{}") or "{}"))

    @property
    def padder(self) -> TextTokenizer:
        return self._padder

    @property
    def tokenizer(self):
        """The `tokenizers.Tokenizer` (the gateway counts and decodes with it)."""
        return self._padder.tok

    @property
    def width(self) -> int:
        return self.mv.dim

    def options(self, raw: dict) -> MultiVectorOptions:
        return resolve(raw, self.prompts)

    def length(self, opts: MultiVectorOptions) -> int:
        return self.mv.query_length if opts.query else self.mv.document_length

    def cutter(self, length: int, truncate: str | None):
        """The tokenizer cutting at `length` (END: the start kept; START: the end; NONE: one token more,
        so that an over-long text is seen and refused), special tokens kept."""
        key = (length, truncate or "END")
        if key not in self._cut:
            from tokenizers import Tokenizer

            t = Tokenizer.from_str(self._padder.tok.to_str())
            t.no_padding()
            t.enable_truncation(max_length=length + (truncate == "NONE"), direction="left" if truncate == "START" else "right")
            self._cut[key] = t
        return self._cut[key]

    # ---- tokenize: each request's rows --------------------------------------------------------
    def tokenize(self, requests: list[MultiVectorRequest]) -> list[Rows | Exception | None]:
        out: list[Rows | Exception | None] = []
        mv = self.mv
        for r in requests:
            o, length = r.options, self.length(r.options)
            texts = [o.prompt + t for t in r.texts] if o.prompt else r.texts
            encs = self.cutter(length, o.truncate).encode_batch(texts, add_special_tokens=True) if texts else []
            n = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
            over, empty = np.nonzero(n > length)[0], np.nonzero(n == 0)[0]
            if over.size:
                out.append(InputError(f"row {int(over[0])}: text is longer than the {length} tokens of a "
                                      f"{o.side} (truncate NONE)", "input", int(over[0])))
                continue
            if empty.size:
                out.append(InputError(f"row {int(empty[0])}: the text tokenizes to no tokens", "input", int(empty[0])))
                continue
            longest = length if (o.query and mv.expansion_id >= 0) else int(n.max(initial=0))
            if r.vectors and len(texts) * longest * mv.dim * 4 > mv.max_vector_bytes:
                out.append(InputError(f"the token vectors of {len(texts)} texts of up to {longest} tokens are "
                                      f"{len(texts) * longest * mv.dim * 4} bytes, over this model's "
                                      f"max_vector_bytes {mv.max_vector_bytes}: send fewer texts per request",
                                      "max_vector_bytes"))
                continue
            ids = [list(e.ids) for e in encs]
            types = [list(e.type_ids) for e in encs]
            attend = None
            if o.query and mv.expansion_id >= 0:   # query expansion: [MASK]s to the length, run (not attended)
                for i, k in enumerate(n.tolist()):
                    ids[i].extend([mv.expansion_id] * (length - k))
                    types[i].extend([0] * (length - k))
                attend = None if mv.expansion_attend else n.tolist()
            out.append(Rows(ids, types, tokens=n, attend=attend))
        return out

    # ---- one encoder run: each row's positions (batch_core.TokenRows) ----------------------------

    # ---- a request's outcome ----------------------------------------------------------------------
    def result(self, request: MultiVectorRequest, out: list[np.ndarray], rows: Rows, lengths: np.ndarray) -> MultiVectorOutcome:
        mv, query = self.mv, request.options.query
        for o, x in zip(out, rows.ids):
            if o.ndim != 2 or o.shape[0] != len(x) or o.shape[1] < (mv.channel + 1 if mv.m3 else mv.dim):
                raise RuntimeError(f"the encoder answered {list(o.shape)} for a row of {len(x)} tokens")
        if mv.m3:
            return self._m3(out, rows)
        vectors = []
        for o, x in zip(out, rows.ids):
            v = o[:, :mv.dim]
            if self._skip is not None and (not query or mv.skip_queries):
                v = v[~np.isin(np.asarray(x, dtype=np.int64), self._skip)]
            vectors.append(np.ascontiguousarray(v, dtype=np.float32))
        return MultiVectorOutcome(vectors, rows.tokens)

    def _m3(self, out: list[np.ndarray], rows: Rows) -> MultiVectorOutcome:
        mv = self.mv
        dense = np.stack([o[0, :mv.hidden] for o in out]).astype(np.float32, copy=False)
        vectors = [np.ascontiguousarray(o[1:, :mv.dim], dtype=np.float32) for o in out]
        sparse = []
        for o, x in zip(out, rows.ids):
            ids, w = np.asarray(x, dtype=np.int64), o[:, mv.channel].astype(np.float32)
            keep = (w > 0) & ~np.isin(ids, self._drop)
            uid, inv = np.unique(ids[keep], return_inverse=True)
            best = np.zeros(len(uid), dtype=np.float32)
            np.maximum.at(best, inv, w[keep])
            sparse.append((uid, best))
        return MultiVectorOutcome(vectors, rows.tokens, dense, sparse)
