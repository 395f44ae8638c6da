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


def fitting_bucket(length: int, buckets: tuple[int, ...] | list[int]) -> int:
    """The smallest bucket that holds `length` tokens (assign_buckets' rule, for one run's longest row)."""
    return int(buckets[int(assign_buckets(np.asarray([length]), buckets)[0])])


def run_rows(p: dict[str, str], rows: int) -> int:
    """A front door's rows per run: `rows`, and on static shapes (`pad_to_bucket`) at most every bucket's max batch
    (`encoder_max_batch_sizes`, the token budget's), so whichever bucket a run pads to has a shape that covers it."""
    if p.get("pad_to_bucket") != "true":
        return rows
    return min(rows, *(int(x) for x in p["encoder_max_batch_sizes"].split(",")))


def chunk_sorted(lengths, max_batch: int, run_overhead_tokens: int) -> list[tuple[int, int]]:
    """Cut ascending `lengths` into [start, end) chunks of at most max_batch rows that minimise
    sum(run_overhead_tokens + rows * longest row): each chunk is padded to its longest row,
    so mixing a 5-token and a 30-token text wastes 25 tokens of compute, while every extra
    run costs a fixed overhead. Exact dynamic program, O(n * max_batch), on Python integers (it runs
    once per execute on the front door's hot path: numpy scalars in this loop cost 10x)."""
    lens = [int(x) for x in lengths]
    n = len(lens)
    best = [0] * (n + 1)
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        lj = lens[j - 1]
        lo = max(0, j - max_batch)
        b, c = best[lo] + (j - lo) * lj, lo
        for i in range(lo + 1, j):   # the first (smallest) i of equal cost wins, as before
            v = best[i] + (j - i) * lj
            if v < b:
                b, c = v, i
        best[j], cut[j] = b + run_overhead_tokens, c
    bounds = []
    j = n
    while j > 0:
        bounds.append((cut[j], j))
        j = cut[j]
    return bounds[::-1]


def plan(lengths: np.ndarray, buckets: tuple[int, ...] | list[int], max_batch: int | tuple[int, ...] | list[int],
         run_overhead_tokens: int = RUN_OVERHEAD_TOKENS, pad_to_bucket: bool = False) -> list[tuple[int, np.ndarray]]:
    """[(bucket_index, row_indices)]: rows of one bucket, sorted by length (ties in row order), in chunks
    of at most max_batch rows (one number, or one per bucket: long buckets take fewer rows per run). With
    pad_to_bucket (fixed-shape engines) every row costs the bucket length, so chunks are simply
    as large as allowed."""
    limits = [int(max_batch)] * len(buckets) if isinstance(max_batch, (int, np.integer)) else [int(m) for m in max_batch]
    if len(limits) != len(buckets) or min(limits) < 1:
        raise ValueError(f"max_batch {max_batch!r}: one positive number, or one per bucket {list(buckets)}")
    lengths = np.asarray(lengths, dtype=np.int64)
    idx = assign_buckets(lengths, buckets)
    if idx.size == 0:
        return []
    if idx.size == 1:   # a lone row (every request at concurrency 1): one chunk, nothing to plan
        return [(int(idx[0]), np.zeros(1, dtype=np.int64))]
    order = np.lexsort((lengths, idx))   # by bucket, then length; stable: ties keep their row order
    out: list[tuple[int, np.ndarray]] = []
    for rows in np.split(order, np.flatnonzero(np.diff(idx[order])) + 1):
        b = int(idx[rows[0]])
        eff = [buckets[b]] * rows.size if pad_to_bucket else lengths[rows].tolist()
        out += [(b, rows[start:end]) for start, end in chunk_sorted(eff, limits[b], run_overhead_tokens)]
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
