"""Late chunking (#71): the chunks of one document embedded in one pass over the whole document, each chunk's
vector pooled from its own tokens, so that every chunk's tokens have seen the whole document (Jina's
`late_chunking: true`). The rule, used by the front door (LateCore, over gRPC: the request parameter
`late_chunking` with the TEXT rows the chunks) and by the gateway (builder/embtrt/scale/gateway/ops/late.py):

- the chunks are joined with SEPARATOR, one space, into the document (or, at the gateway, explicit spans cut
  one document); a token belongs to the chunk holding its last character (a byte-level piece that carries
  the space before a word goes with the word); special tokens and tokens outside every chunk belong to none;
- each chunk's vector is the mean of its tokens' embeddings, L2-normalized where the model normalizes;
- the whole document in one pass: no truncation (over the max length, the first chunk that does not fit is
  named); no prompt (context no chunk owns); mean pooling only (a CLS or last-token vector is one position's).

Plain numpy (+ tokenizers), tested without Triton.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import InputError
from .batch_core import TokenRows
from .core import Outcome, RequestCore, Rows
from .options import DEFAULT, RequestOptions

SEPARATOR = " "


def join(chunks: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The document of consecutive chunks and each chunk's (start, end) characters in it."""
    spans, at = [], 0
    for c in chunks:
        spans.append((at, at + len(c)))
        at += len(c) + len(SEPARATOR)
    return SEPARATOR.join(chunks), spans


def owners(offsets: list[tuple[int, int]], special: list[int], spans: list[tuple[int, int]]) -> np.ndarray:
    """Each token's chunk (its last character's), -1 for a special token or one outside every chunk."""
    starts = np.array([a for a, _ in spans], np.int64)
    ends = np.array([b for _, b in spans], np.int64)
    last = np.array([b - 1 for _, b in offsets], np.int64)
    k = np.searchsorted(starts, last, side="right") - 1
    inside = (k >= 0) & (last < ends[np.clip(k, 0, None)])
    empty = np.array([b <= a for a, b in offsets], bool)
    return np.where(inside & ~np.asarray(special, bool) & ~empty, k, -1)


def first_empty(owner: np.ndarray, n: int) -> int | None:
    """The first chunk that owns no token (empty or whitespace only), None when each owns some."""
    counts = np.bincount(owner[owner >= 0], minlength=n)
    return int(np.nonzero(counts == 0)[0][0]) if (counts == 0).any() else None


def not_fitting(owner: np.ndarray, max_len: int) -> int:
    """The first chunk with a token past the first max_len tokens (for the refusal); where only tokens no chunk
    owns are past it (a special token, text after the last span), the last chunk that owns one."""
    past = owner[max_len:]
    if (past >= 0).any():
        return int(past[past >= 0][0])
    owned = owner[owner >= 0]
    return int(owned.max()) if owned.size else 0


def pool(tokens: np.ndarray, owner: np.ndarray, n: int, normalize: bool) -> np.ndarray:
    """Each chunk's mean token embedding [n, hidden] (normalized where the model normalizes); a chunk that owns
    no token (first_empty) is zeros. The owners run in order (spans are), so each chunk's tokens are one run
    with only unowned tokens (special ones, text between spans) between runs: one sum per run's slice of the
    token rows as they are (no copy), the few unowned rows inside a slice taken off again; float32 sums, as
    sentence-transformers' pooling."""
    tokens = np.asarray(tokens, np.float32)
    idx = np.nonzero(owner >= 0)[0]
    o = owner[idx]
    vecs = np.zeros((n, tokens.shape[1]), np.float32)
    counts = np.bincount(o, minlength=n)
    nz = np.nonzero(counts)[0]
    if nz.size:
        if o.size > 1 and (np.diff(o) < 0).any():   # never with ordered spans; exact if it were
            order = np.argsort(o, kind="stable")
            o, t = o[order], tokens[idx[order]]
            vecs[nz] = np.add.reduceat(t, np.searchsorted(o, nz), axis=0)
        else:
            firsts = idx[np.searchsorted(o, nz)]        # each chunk's first token
            ends = [*firsts[1:].tolist(), int(idx[-1]) + 1]   # segment k: firsts[k] up to the next chunk's first
            # a sum per slice of rows (contiguous: vectorized), not np.add.reduceat (row by row: 50x slower here)
            sums = np.stack([tokens[a:b].sum(axis=0) for a, b in zip(firsts.tolist(), ends)])
            inside = np.nonzero(owner < 0)[0]
            inside = inside[(inside > firsts[0]) & (inside < ends[-1])]
            if inside.size:
                np.subtract.at(sums, np.searchsorted(firsts, inside, side="right") - 1, tokens[inside])
            vecs[nz] = sums
        vecs[nz] /= counts[nz, None].astype(np.float32)
    if normalize:
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    return vecs


def untruncated(tokenizer):
    """A copy of the model's `tokenizers.Tokenizer` with no truncation and no padding: the whole document, with
    its offsets."""
    from tokenizers import Tokenizer

    whole = Tokenizer.from_str(tokenizer.to_str())
    whole.no_truncation()
    whole.no_padding()
    return whole


def document_tokens(whole, document: str, spans: list[tuple[int, int]], max_len: int, name=lambda k: f"row {k}"):
    """(the document's encoding, each token's chunk), or an InputError naming the chunk at fault (`name(k)`: how
    the caller calls chunk k): the document over max_len tokens, or a chunk that owns no token."""
    enc = whole.encode(document)
    owner = owners(enc.offsets, enc.special_tokens_mask, spans)
    if len(enc.ids) > max_len:
        k = not_fitting(owner, max_len)
        raise InputError(f"late chunking embeds the document in one pass: it is {len(enc.ids)} tokens, the model takes "
                         f"at most {max_len}; {name(k)} and the chunks after it do not fit (send them as another "
                         "document)", "TEXT", k)
    k = first_empty(owner, len(spans))
    if k is not None:
        raise InputError(f"{name(k)}: the chunk holds no token of its own (empty or whitespace only)", "TEXT", k)
    return enc, owner


def refusal(pooling: str, fused: bool) -> str | None:
    """Why a model cannot be late chunked, None when it can."""
    if pooling != "mean":
        return (f"late chunking pools each chunk's own tokens by their mean; this model pools by {pooling} (one "
                "position's vector, which no chunk owns)")
    if fused:
        return ("late chunking needs each token's embedding, and this model was built with its pooling inside the "
                "graph (--pooler fused): rebuild it with --pooler python")
    return None


@dataclass
class LateRequest:
    """One document's chunks (the TEXT rows) with the request's options; `owner` filled by tokenize."""

    chunks: list[str]
    options: RequestOptions = DEFAULT
    owner: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class LateCore(TokenRows, RequestCore):
    """The request core for late chunking: each request one row (its document, untruncated), the encoder's token
    embeddings kept per row (a --pooler python build's), pooled per chunk in `result`. TOKENS per chunk: the
    tokens it owns, those no chunk owns (special tokens) counted with the first, so that they add up to the pass."""

    def __init__(self, core: RequestCore) -> None:
        super().__init__(core.cfg, core.tokenizer, core.options)
        self.clock = core.clock
        self.whole = untruncated(core.tokenizer.tok)

    def tokenize(self, requests: list) -> list:
        out: list = []
        why = refusal(self.cfg.pooling, self.cfg.fused)
        for r in requests:
            if why is not None:
                out.append(InputError(why, "late_chunking"))
                continue
            document, spans = join(r.chunks)
            try:
                enc, r.owner = document_tokens(self.whole, document, spans, self.tokenizer.max_length)
            except InputError as exc:
                out.append(exc)
                continue
            tokens = np.bincount(r.owner[r.owner >= 0], minlength=len(spans)).astype(np.int64)
            tokens[0] += int((r.owner < 0).sum())
            out.append(Rows([list(enc.ids)], [list(enc.type_ids)], 0, tokens))
        return out

    def result(self, request: LateRequest, out, rows, lengths) -> Outcome:
        vecs = pool(out[0], request.owner, len(request.chunks), self.cfg.normalize)
        return Outcome(self.options.finish(vecs, request.options), rows.tokens)
