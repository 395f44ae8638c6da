"""Send each row to the smallest length bucket that holds it; gather results in order."""

from __future__ import annotations

import numpy as np

# The fixed cost of one encoder run, in tokens of compute, that the chunking below weighs against
# padding when a model's config does not set `run_overhead_tokens`. Builds write this same value
# (embtrt.repository.budget.RUN_OVERHEAD_TOKENS, checked equal by a test); `embtrt tune` measures the
# serving host's own. docs/bench.md says how the value was chosen.
RUN_OVERHEAD_TOKENS = 8


def assign_buckets(lengths: np.ndarray, buckets: tuple[int, ...] | list[int]) -> np.ndarray:
    """Bucket index per row: the smallest bucket >= the row's token count.

    Rows are already truncated to the largest bucket (the max sequence length), so every
    row fits; a longer row is a bug upstream and raises.
    """
    edges = np.asarray(buckets, dtype=np.int64)
    idx = np.searchsorted(edges, np.asarray(lengths, dtype=np.int64), side="left")
    if idx.size and int(idx.max()) >= len(edges):
        raise ValueError(f"a row of {int(np.max(lengths))} tokens exceeds the largest bucket {int(edges[-1])}")
    return idx


def chunk_sorted(lengths: np.ndarray, max_batch: int, run_overhead_tokens: int) -> list[tuple[int, int]]:
    """Cut ascending `lengths` into [start, end) chunks of at most max_batch rows that minimise
    sum(run_overhead_tokens + rows * longest row): each chunk is padded to its longest row,
    so mixing a 5-token and a 30-token text wastes 25 tokens of compute, while every extra
    run costs a fixed overhead. Exact dynamic program, O(n * max_batch)."""
    n = len(lengths)
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    cut = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        lj = float(lengths[j - 1])
        for i in range(max(0, j - max_batch), j):
            cost = best[i] + run_overhead_tokens + (j - i) * lj
            if cost < best[j]:
                best[j], cut[j] = cost, i
    bounds = []
    j = n
    while j > 0:
        bounds.append((int(cut[j]), j))
        j = int(cut[j])
    return bounds[::-1]


def plan(lengths: np.ndarray, buckets: tuple[int, ...] | list[int], max_batch: int | tuple[int, ...] | list[int],
         run_overhead_tokens: int = RUN_OVERHEAD_TOKENS, pad_to_bucket: bool = False) -> list[tuple[int, np.ndarray]]:
    """[(bucket_index, row_indices)]: rows of one bucket, sorted by length, in chunks of at most
    max_batch rows (one number, or one per bucket: long buckets take fewer rows per run). With
    pad_to_bucket (fixed-shape engines) every row costs the bucket length, so chunks are simply
    as large as allowed."""
    limits = [int(max_batch)] * len(buckets) if isinstance(max_batch, (int, np.integer)) else [int(m) for m in max_batch]
    if len(limits) != len(buckets) or min(limits) < 1:
        raise ValueError(f"max_batch {max_batch!r}: one positive number, or one per bucket {list(buckets)}")
    idx = assign_buckets(lengths, buckets)
    out: list[tuple[int, np.ndarray]] = []
    for b in np.unique(idx):
        rows = np.nonzero(idx == b)[0]
        rows = rows[np.argsort(lengths[rows], kind="stable")]
        eff = np.full(rows.size, buckets[b]) if pad_to_bucket else lengths[rows]
        for start, end in chunk_sorted(eff, limits[b], run_overhead_tokens):
            out.append((int(b), rows[start:end]))
    return out


def gather(n_rows: int, dim: int, parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Place each (row_indices, vectors) part at its rows; every row must be filled once."""
    out = np.empty((n_rows, dim), dtype=np.float32)
    seen = np.zeros(n_rows, dtype=bool)
    for rows, vecs in parts:
        if vecs.shape != (rows.size, dim):
            raise ValueError(f"gather: got {vecs.shape} for {rows.size} rows of dim {dim}")
        if seen[rows].any():
            raise ValueError("gather: a row was filled twice")
        out[rows] = vecs
        seen[rows] = True
    if not seen.all():
        raise ValueError(f"gather: rows {np.nonzero(~seen)[0][:5].tolist()} were never filled")
    return out
