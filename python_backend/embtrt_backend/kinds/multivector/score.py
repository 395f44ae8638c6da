"""Late interaction on token vectors: MaxSim (MultiVectorEncoder.similarity: the sum over the query's
vectors of the largest dot product with the document's; meanmaxsim divides by the query's count) and
bge-m3's scores (FlagEmbedding's BGEM3FlagModel.compute_score: dense, sparse, colbert and their weighted
means). Plain numpy; the gateway ranks with it and the gates compare with it."""

from __future__ import annotations

import numpy as np

from ...token_vectors import NO_TOKEN, maxsim, maxsim_matrix  # noqa: F401 (the token-vector head's scores)


def lexical(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """bge-m3's lexical matching score: sum over the token ids both have of the product of their weights."""
    common, ia, ib = np.intersect1d(a[0], b[0], assume_unique=True, return_indices=True)
    return float(np.dot(a[1][ia].astype(np.float64), b[1][ib].astype(np.float64))) if len(common) else 0.0


# what each mode (compute_score's names) reads: dense, lexical (the lexical weights), colbert (token vectors)
M3_PARTS = {"dense": ("dense",), "sparse": ("lexical",), "colbert": ("colbert",), "sparse+dense": ("dense", "lexical"),
            "colbert+sparse+dense": ("dense", "lexical", "colbert")}
M3_MODES = tuple(M3_PARTS)


def m3_score(mode: str, q: dict, d: dict, weights=(1.0, 1.0, 1.0)) -> float:
    """One (query, passage) pair's score in `mode` as BGEM3FlagModel.compute_score reports it, from each
    side's parts the mode reads ({"dense": vector, "lexical": (ids, weights), "colbert": vectors}): dense (dot
    of the normalised vectors), sparse (lexical), colbert (mean MaxSim over the query's vectors), and the
    weighted means sparse+dense (w_dense, w_sparse) and colbert+sparse+dense (w_dense, w_sparse, w_colbert)."""
    w = dict(zip(("dense", "lexical", "colbert"), (float(x) for x in weights)))
    part = {"dense": lambda: float(np.dot(np.asarray(q["dense"], np.float32), np.asarray(d["dense"], np.float32))),
            "lexical": lambda: lexical(q["lexical"], d["lexical"]),
            "colbert": lambda: maxsim(q["colbert"], d["colbert"], mean=True)}
    parts = M3_PARTS[mode]
    if len(parts) == 1:
        return part[parts[0]]()
    return sum(w[p] * part[p]() for p in parts) / sum(w[p] for p in parts)
