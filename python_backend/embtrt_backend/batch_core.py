"""What every kind's core shares (#50: one request core): a batch of requests is prepared into
per-bucket chunks (the kind's `prepare`), each chunk's rows are padded into the encoder's feeds,
run through the encoder the caller passes in and turned into rows (the kind's `after`: pooling for
an embedder, nothing for a reranker's logits), and the batch's `finish` makes one outcome per
request. An encoder failure is the error of every request it was serving, never the caller's.

RequestCore (core.py: texts, or token ids) and PairCore (kinds/reranker/pairs.py: query-document pairs) are the
two cores on it; plain numpy (+ tokenizers), tested without Triton.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .routing import plan
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


@dataclass
class Batch:
    outcomes: list                    # None: still to be served; an outcome with its error: refused
    chunks: list[Chunk] = field(default_factory=list)
    finish: Callable[[list[np.ndarray]], list] = lambda outs: []


class BatchCore:
    cfg: Any                 # the kind's config: buckets, input_names, pad_to_bucket, ...
    outcome: type            # the kind's outcome class (error=...)

    @property
    def padder(self) -> TextTokenizer:
        """The tokenizer that pads rows into feeds (its input names, pad id)."""
        raise NotImplementedError

    def prepare(self, requests: list) -> Any:
        """-> a batch: `outcomes` (None: to be served), `chunks` (bucket, rows, ids, type_ids), `finish`."""
        raise NotImplementedError

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
        return self.padder.pad(Encoded(chunk.ids, chunk.type_ids, lengths), range(len(chunk.ids)), width,
                               self.cfg.input_names)

    def run(self, requests: list, encoder: Encoder) -> list:
        """prepare, every chunk through `encoder(bucket, feeds)` and `after`, finish."""
        batch = self.prepare(requests)
        if not batch.chunks:
            return [o or self.outcome(error=RuntimeError("not served")) for o in batch.outcomes]
        try:
            outs = []
            for c in batch.chunks:
                feeds = self.feeds(c)
                outs.append(self.after(encoder(c.bucket, feeds), feeds, c))
        except Exception as exc:  # the encoder's failure is that of the requests it was serving
            return [o or self.outcome(error=exc) for o in batch.outcomes]
        return batch.finish(outs)
