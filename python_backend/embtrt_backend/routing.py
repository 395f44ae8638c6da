"""Send each row to the smallest length bucket that holds it; gather results in order."""

from __future__ import annotations

import numpy as np


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


def plan(lengths: np.ndarray, buckets: tuple[int, ...] | list[int], max_batch: int) -> list[tuple[int, np.ndarray]]:
    """[(bucket_index, row_indices)], each chunk at most max_batch rows, rows sorted by length."""
    idx = assign_buckets(lengths, buckets)
    out: list[tuple[int, np.ndarray]] = []
    for b in np.unique(idx):
        rows = np.nonzero(idx == b)[0]
        rows = rows[np.argsort(lengths[rows], kind="stable")]
        for start in range(0, rows.size, max_batch):
            out.append((int(b), rows[start:start + max_batch]))
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
