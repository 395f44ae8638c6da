"""The one request core of every kind (#50). A batch of requests:

    prepare(requests) -> Batch: the kind's `tokenize` turns each request into its encoder rows (or
        the error refusing that request only); the rows of every request served are planned into
        per-bucket chunks (routing.plan);
    each chunk: its rows padded into the encoder's feeds, the encoder the caller passes in (a BLS
        call, a local runtime, the gateway's upstream gRPC call), the kind's `after` (pooling for an
        embedder whose graph does not pool; a reranker's logits as [rows, labels]);
    Batch.finish(outputs per chunk) -> one outcome per request: the kind's `result` of its rows'
        outputs (an embedder's windows merged and options applied, a reranker's activation).
An encoder failure is the error of every request it was serving, never the caller's.

A kind writes `tokenize`, `result` (and `after` where needed): RequestCore (core.py: texts, or
token ids; the embedder and the sparse encoder) and PairCore (embtrt_backend/pairs.py: query-document
pairs). Plain numpy (+ tokenizers), tested without Triton.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .routing import gather, plan
from .stages import NULL
from .text import Encoded, TextTokenizer

Encoder = Callable[[int, dict[str, np.ndarray]], np.ndarray]


@dataclass
class Chunk:
    """Rows of one bucket that go to the encoder in one run (or, coalesced, with other chunks)."""

    bucket: int                       # the bucket's length in tokens
    rows: np.ndarray                  # positions in the batch's encoded rows
    ids: list[list[int]]
    type_ids: list[list[int]]
    skip: np.ndarray | None = None    # per row: leading prompt tokens left out of pooling (embedders)
    attend: np.ndarray | None = None  # per row: its leading tokens attended (None: all; query expansion)


@dataclass
class Rows:
    """One request's encoder rows, as its kind's `tokenize` makes them."""

    ids: list[list[int]]
    type_ids: list[list[int]]
    skip: int = 0                        # leading prompt tokens left out of pooling, in every row (embedders)
    tokens: np.ndarray | None = None     # tokens per item where an item is not one row (None: each row's length)
    owner: np.ndarray | None = None      # each row's item where an item has several rows (--overflow chunk windows)
    attend: list[int] | None = None      # each row's leading tokens attended, the rest run but not attended
                                         # (a ColBERT query's expansion: [MASK]s scored, not attended); None: all


@dataclass
class Batch:
    outcomes: list                    # None: still to be served; an outcome with its error: refused
    chunks: list[Chunk] = field(default_factory=list)
    finish: Callable[[list[np.ndarray]], list] = lambda outs: []


class BatchCore:
    cfg: Any                 # the kind's config: buckets, input_names, pad_to_bucket, ...
    outcome: type            # the kind's outcome class (error=...)
    clock = NULL             # the front door's stage timers (embtrt_backend.stages), when its flag is on

    @property
    def padder(self) -> TextTokenizer:
        """The tokenizer that pads rows into feeds (its input names, pad id)."""
        raise NotImplementedError

    @property
    def width(self) -> int:
        """The values of one row's output (an embedder's dim, a reranker's labels)."""
        raise NotImplementedError

    def tokenize(self, requests: list) -> list[Rows | Exception | None]:
        """Each request's rows, or the error refusing it (an InputError naming its item); None: nothing to serve."""
        raise NotImplementedError

    def result(self, request: Any, out: np.ndarray, rows: Rows, lengths: np.ndarray) -> Any:
        """A request's outcome from its rows' outputs (`out`, in row order) and their lengths in tokens."""
        raise NotImplementedError

    def prepare(self, requests: list) -> Batch:
        """-> a batch: `outcomes` (None: to be served; a refused request's error), `chunks`, `finish`."""
        outcomes: list = [None] * len(requests)
        ids: list[list[int]] = []
        types: list[list[int]] = []
        skips: list[int] = []
        keep: list[tuple[int, int, Rows]] = []     # (request, its first row, its rows)
        tokenized = self.tokenize(requests)
        self.clock.mark("tokenize")
        for i, rows in enumerate(tokenized):
            if isinstance(rows, Exception):
                outcomes[i] = self.outcome(error=rows)
            elif rows is not None:
                keep.append((i, len(ids), rows))
                ids.extend(rows.ids)
                types.extend(rows.type_ids)
                skips.extend([rows.skip] * len(rows.ids))
        if not keep:
            return Batch(outcomes)
        lengths, chunks = self.chunks(ids, types, np.asarray(skips, dtype=np.int64))
        self.clock.mark("plan")
        self.clock.add_rows(len(ids))
        if any(r.attend is not None for _, _, r in keep):   # some rows attend fewer tokens than they run
            att = np.concatenate([np.asarray(r.attend if r.attend is not None else [len(x) for x in r.ids], np.int64)
                                  for _, _, r in keep])
            for c in chunks:
                c.attend = att[c.rows]

        def finish(outs: list[np.ndarray]) -> list:
            allv = self.collect(len(ids), [(c.rows, v) for c, v in zip(chunks, outs)])
            out = list(outcomes)
            for i, first, rows in keep:
                n = len(rows.ids)
                out[i] = self.result(requests[i], allv[first:first + n], rows, lengths[first:first + n])
            return [o if o is not None else self.outcome(error=RuntimeError("not served")) for o in out]

        return Batch(outcomes, chunks, finish)

    def collect(self, n_rows: int, parts: list[tuple[np.ndarray, Any]]) -> Any:
        """Every chunk's rows' results in the batch's row order: [rows, width] by default (routing.gather);
        a kind whose rows differ in size (token vectors) gathers its own."""
        return gather(n_rows, self.width, parts)

    def after(self, output: np.ndarray, feeds: dict[str, np.ndarray], chunk: Any) -> np.ndarray:
        """The encoder's output of one chunk -> its rows' results (as is by default)."""
        return output

    def chunks(self, ids: list[list[int]], types: list[list[int]], skip: np.ndarray | None = None
               ) -> tuple[np.ndarray, list[Chunk]]:
        """The rows' lengths, and the rows planned into per-bucket chunks (routing.plan)."""
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        b, c = self.cfg.buckets, self.cfg
        return lengths, [Chunk(b[k], rows, [ids[j] for j in rows], [types[j] for j in rows], None if skip is None else skip[rows])
                         for k, rows in plan(lengths, b, c.max_batch, c.run_overhead, c.pad_to_bucket)]

    def feeds(self, chunk: Any) -> dict[str, np.ndarray]:
        """The chunk's rows right-padded: to the bucket (fixed-shape encoders) or to its longest row."""
        width = chunk.bucket if self.cfg.pad_to_bucket else max(len(x) for x in chunk.ids)
        lengths = np.fromiter((len(x) for x in chunk.ids), dtype=np.int64, count=len(chunk.ids))
        feeds = self.padder.pad(Encoded(chunk.ids, chunk.type_ids, lengths), range(len(chunk.ids)), width,
                                self.cfg.input_names)
        if chunk.attend is not None:   # tokens run but not attended (a ColBERT query's expansion)
            feeds["attention_mask"][np.arange(width)[None, :] >= chunk.attend[:, None]] = 0
        return feeds

    def run(self, requests: list, encoder: Encoder) -> list:
        """prepare, every chunk through `encoder(bucket, feeds)` and `after`, finish."""
        batch = self.prepare(requests)
        if not batch.chunks:
            return [o or self.outcome(error=RuntimeError("not served")) for o in batch.outcomes]
        clock = self.clock
        try:
            outs = []
            for c in batch.chunks:
                feeds = self.feeds(c)
                clock.mark("pad")
                out = encoder(c.bucket, feeds)
                clock.mark("encode")
                outs.append(self.after(out, feeds, c))
                clock.mark("pool")
        except Exception as exc:  # the encoder's failure is that of the requests it was serving
            return [o or self.outcome(error=exc) for o in batch.outcomes]
        done = batch.finish(outs)
        clock.mark("finish")
        return done


class TokenRows(BatchCore):
    """A core whose rows' results are token vectors (each row its own length, unpadded): a multi-vector
    model's, late chunking's. Put before the kind's core in the bases."""

    def after(self, output: np.ndarray, feeds: dict[str, np.ndarray], chunk: Any) -> list[np.ndarray]:
        return [output[j, :len(x)] for j, x in enumerate(chunk.ids)]

    def collect(self, n_rows: int, parts: list) -> list[np.ndarray]:
        out: list = [None] * n_rows
        for rows, vecs in parts:
            for r, v in zip(rows.tolist(), vecs, strict=True):
                out[r] = v
        return out
