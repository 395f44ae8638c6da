"""The token-vectors head's layout and scores (every kind with the head: ColBERT and bge-m3 texts, page images):
each item's [count, dim] vectors travel zero-padded as TOKEN_EMBEDDINGS [items, max count, dim] with
TOKEN_COUNTS [items, 1]; late interaction is MaxSim (MultiVectorEncoder.similarity and ColPali's
score_retrieval: the sum over the query's vectors of the largest dot product with the document's;
meanmaxsim divides by the query's count). Plain numpy."""

from __future__ import annotations

import numpy as np

# a text's side by the names requests give it (input_type, embedding_mode): a query, or a document
SIDES = {"query": "query", "document": "document", "passage": "document", "corpus": "document"}
# the head's front-door outputs, and bge-m3's (FlagEmbedding's dense, lexical and colbert parts) in its order
VECTORS = ("TOKEN_EMBEDDINGS", "TOKEN_COUNTS")
M3_ALL = ("DENSE", "SPARSE_INDICES", "SPARSE_VALUES", *VECTORS)


def padded(vectors: list[np.ndarray], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-text vectors -> (TOKEN_EMBEDDINGS [texts, max count, dim] zero-padded, TOKEN_COUNTS [texts, 1])."""
    counts = np.fromiter((len(v) for v in vectors), dtype=np.int64, count=len(vectors))
    out = np.zeros((len(vectors), int(counts.max(initial=0)), dim), dtype=np.float32)
    for i, v in enumerate(vectors):
        out[i, :len(v)] = v
    return out, counts.reshape(-1, 1)


def unpadded(embeddings: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """The inverse of padded: each text's [count, dim] vectors."""
    return [embeddings[i, :int(n)] for i, n in enumerate(np.asarray(counts).reshape(-1))]


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
