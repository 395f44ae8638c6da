"""The pair input's reference side (a part: the reranker and the classifier are built of it): a
*ForSequenceClassification folder loaded through sentence-transformers' CrossEncoder (which holds
exactly transformers' model and tokenizer of the folder, and its max length), and real query-passage
pairs from the calibration corpus."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import ModelError


def load_cross_encoder(path: Path, max_length: int | None = None, trust_remote_code: bool = False):
    from sentence_transformers import CrossEncoder

    try:
        return CrossEncoder(str(path), device="cpu", max_length=max_length, trust_remote_code=trust_remote_code)
    except Exception as exc:  # sentence-transformers / transformers raise many types
        raise ModelError(f"sentence-transformers cannot load {path} as a CrossEncoder: {exc}",
                         "a reranker or classifier folder loads with sentence_transformers.CrossEncoder") from exc


def corpus_pairs(texts: list[str], queries: int = 8, docs: int = 24) -> tuple[list[str], list[list[str]]]:
    """Real query-passage pairs from the calibration corpus: short texts as queries (the first
    clause of a text), every query against `docs` passages of mixed lengths (others of the corpus,
    one concatenation long enough to be truncated)."""
    qs = [t.split(".")[0][:120] for t in texts[:queries]]
    pool = texts[queries:]
    out = []
    for i in range(queries):
        start = (i * docs) % max(1, len(pool) - docs)
        d = pool[start:start + docs - 1]
        d.append(" ".join(pool[start:start + 12]))   # longer than the max length: cut as predict cuts it
        out.append(d)
    return qs, out


def score_difference(got: np.ndarray, want: np.ndarray, activation: str) -> float:
    """max |difference| of two sets of logits as scores, each after the model's own activation (as the served
    front door applies it: embtrt_backend.pairs.activate): a scores head's plan check."""
    from embtrt_backend.pairs import activate

    return float(np.abs(activate(got, "default", activation).astype(np.float64)
                        - activate(want, "default", activation).astype(np.float64)).max())
