"""The reranker's reference: sentence-transformers' CrossEncoder, and what kind a model folder is.

A folder is a reranker when sentence-transformers saved it as a CrossEncoder
(config_sentence_transformers.json `model_type: CrossEncoder`), or its config.json names a
`*ForSequenceClassification` architecture of one label or with sentence-transformers' older
CrossEncoder mark (config.json's `sbert_ce_default_activation_function`); such an architecture of
several labels otherwise is a classifier (embtrt.kinds.classifier); else it is an embedder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embtrt_backend.kinds import CLASSIFIER, EMBEDDER, MULTIMODAL, MULTIVECTOR, RERANKER, SPARSE

from ...errors import ModelError


def detect_kind(path: Path) -> tuple[str, str]:
    """(kind, why) of a model folder: a kind's name (embtrt_backend.kinds), and what said so."""
    path = Path(path)

    def read(name: str) -> dict:
        try:
            doc = json.loads((path / name).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {}
        return doc if isinstance(doc, dict) else {}

    st = read("config_sentence_transformers.json")
    from ..multivector.reference import m3_heads
    from ..sparse.reference import sparse_modules

    if st.get("model_type") == "MultiVectorEncoder":
        return MULTIVECTOR.name, "config_sentence_transformers.json says model_type MultiVectorEncoder (ColBERT)"
    heads = m3_heads(path)
    if heads:   # bge-m3 (its folder is a SentenceTransformer too: --kind embedder serves the dense vector alone)
        return MULTIVECTOR.name, f"{' and '.join(heads)} beside the model (bge-m3: dense, sparse and ColBERT outputs)"

    if st.get("model_type") == "SparseEncoder" or sparse_modules(path):
        return SPARSE.name, "a sentence-transformers SparseEncoder folder (SPLADE)"
    if st.get("model_type") == "CrossEncoder":
        return RERANKER.name, "config_sentence_transformers.json says model_type CrossEncoder"
    cfg = read("config.json")
    archs = [a for a in cfg.get("architectures") or [] if isinstance(a, str)]
    seq = [a for a in archs if a.endswith("ForSequenceClassification")]
    if seq:
        labels = len(cfg.get("id2label") or {}) or int(cfg.get("num_labels") or 2)
        if "sbert_ce_default_activation_function" in cfg:   # sentence-transformers < 4 saved its CrossEncoders so
            return RERANKER.name, ("config.json has sbert_ce_default_activation_function (a CrossEncoder saved by "
                                   "sentence-transformers before 4.0)")
        if labels == 1:
            return RERANKER.name, f"config.json names the architecture {seq[0]} with one label (a cross-encoder)"
        return CLASSIFIER.name, (f"config.json names the architecture {seq[0]} with {labels} labels and no "
                                 "config_sentence_transformers.json saying CrossEncoder (a classifier)")
    from ..multimodal.reference import is_multimodal

    if is_multimodal(path):
        return MULTIMODAL.name, "a sentence-transformers folder whose model encodes texts and images (CLIP-style)"
    if st.get("model_type") == "SentenceTransformer" or (path / "modules.json").is_file():
        return EMBEDDER.name, "a sentence-transformers SentenceTransformer folder"
    return EMBEDDER.name, f"config.json names {', '.join(archs) or 'no architecture'} (an encoder)"


@dataclass(frozen=True)
class CrossInfo:
    max_length: int
    num_labels: int
    activation: str          # "sigmoid" or "identity": CrossEncoder's default activation_fn
    input_names: tuple[str, ...]


def load_cross_encoder(path: Path, max_length: int | None = None, trust_remote_code: bool = False):
    from sentence_transformers import CrossEncoder

    try:
        return CrossEncoder(str(path), device="cpu", max_length=max_length, trust_remote_code=trust_remote_code)
    except Exception as exc:  # sentence-transformers / transformers raise many types
        raise ModelError(f"sentence-transformers cannot load {path} as a CrossEncoder: {exc}",
                         "a reranker folder loads with sentence_transformers.CrossEncoder") from exc


def activation_name(fn: object) -> str:
    import torch

    if isinstance(fn, torch.nn.Sigmoid):
        return "sigmoid"
    if fn is None or isinstance(fn, torch.nn.Identity):
        return "identity"
    raise ModelError(f"CrossEncoder activation {type(fn).__name__} is not served by embtrt",
                     "embtrt serves Sigmoid and Identity activations (raw logits and softmax on request)")


def cross_info(ce) -> CrossInfo:
    tok = ce.tokenizer
    probe = tok("a", "b")
    names = tuple(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in probe)
    return CrossInfo(int(ce.max_seq_length), int(ce.num_labels), activation_name(ce.activation_fn), names)


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


def ce_predict(ce, pairs: list[tuple[str, str]]) -> np.ndarray:
    """CrossEncoder.predict at fp32, batch 32: [pairs, labels] (a 1-label model: [pairs, 1])."""
    s = np.asarray(ce.predict(pairs, batch_size=32, show_progress_bar=False), dtype=np.float32)
    return s.reshape(len(pairs), -1)
