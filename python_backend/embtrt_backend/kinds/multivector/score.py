"""Late interaction on token vectors: MaxSim (MultiVectorEncoder.similarity: the sum over the query's
vectors of the largest dot product with the document's; meanmaxsim divides by the query's count) and
bge-m3's scores (FlagEmbedding's BGEM3FlagModel.compute_score: dense, sparse, colbert and their weighted
means). Plain numpy; the gateway ranks with it and the gates compare with it."""

from __future__ import annotations

import numpy as np

NO_TOKEN = -1e9   # a document with no scoreable vector (sentence-transformers' score for it)


def maxsim(query: np.ndarray, document: np.ndarray, mean: bool = False) -> float:
    """One query's [q, dim] vectors against one document's [d, dim]: sum_i max_j q_i . d_j, in float32
    (mean: divided by q)."""
    if len(document) == 0:
        return NO_TOKEN
    s = float((np.asarray(query, np.float32) @ np.asarray(document, np.float32).T).max(axis=1).sum(dtype=np.float32))
    return s / max(len(query), 1) if mean else s


def maxsim_matrix(queries: list[np.ndarray], documents: list[np.ndarray], mean: bool = False) -> np.ndarray:
    """[queries, documents] float32 MaxSim scores."""
    return np.asarray([[maxsim(q, d, mean) for d in documents] for q in queries], dtype=np.float32)


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
