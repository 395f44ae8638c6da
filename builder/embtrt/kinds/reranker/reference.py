"""The reranker's reference: sentence-transformers' CrossEncoder, and its detection rule.

A folder is a reranker when sentence-transformers saved it as a CrossEncoder
(config_sentence_transformers.json `model_type: CrossEncoder`), or its config.json names a
`*ForSequenceClassification` architecture of one label or with sentence-transformers' older
CrossEncoder mark (config.json's `sbert_ce_default_activation_function`); such an architecture of
several labels otherwise is a classifier (the registry's next rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import ModelError
from ...reference.detect import sequence_head, st_model_type
from ...reference.pairs import corpus_pairs, load_cross_encoder  # noqa: F401  (the reranker's own, shared with the classifier)


def cross_encoder_rule(path: Path) -> tuple[bool, str]:
    """Detection (embtrt_backend.kinds.DETECTION): a CrossEncoder folder, or a *ForSequenceClassification
    architecture of one label or with sentence-transformers' older CrossEncoder mark."""
    if st_model_type(path) == "CrossEncoder":
        return True, "config_sentence_transformers.json says model_type CrossEncoder"
    llm = causal_reranker(path)
    if llm:
        return True, llm
    head = sequence_head(path)
    if head is None:
        return False, "no model_type CrossEncoder and no *ForSequenceClassification architecture in config.json"
    if head.cross_encoder_mark:
        return True, ("config.json has sbert_ce_default_activation_function (a CrossEncoder saved by "
                      "sentence-transformers before 4.0)")
    if head.labels == 1:
        return True, f"config.json names the architecture {head.architecture} with one label (a cross-encoder)"
    return False, f"config.json names the architecture {head.architecture} with {head.labels} labels and no CrossEncoder mark"


def causal_reranker(path: Path) -> str:
    """What makes `path` an LLM-style reranker ("" where it is not): a *ForCausalLM architecture without
    sentence-transformers' modules.json (a decoder embedder says how it pools there), whose tokenizer has "yes"
    and "no" tokens: CrossEncoder loads it under LogitScore (logit["yes"] - logit["no"] at the last token)."""
    from ...common.files import json_object

    archs = [a for a in json_object(path / "config.json").get("architectures") or [] if isinstance(a, str)]
    causal = next((a for a in archs if a.endswith("ForCausalLM")), None)
    if causal is None or (path / "modules.json").is_file() or not (path / "tokenizer.json").is_file():
        return ""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    if tok.token_to_id("yes") is None or tok.token_to_id("no") is None:
        return ""
    return (f"config.json names the causal LM {causal}, no modules.json, and its tokenizer has 'yes' and 'no' tokens "
            "(an LLM-style reranker, as CrossEncoder loads it: logit['yes'] - logit['no'] at the last token)")


@dataclass(frozen=True)
class CrossInfo:
    max_length: int
    num_labels: int
    activation: str          # "sigmoid" or "identity": CrossEncoder's default activation_fn
    input_names: tuple[str, ...]


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


def ce_predict(ce, pairs: list[tuple[str, str]]) -> np.ndarray:
    """CrossEncoder.predict at fp32, batch 32: [pairs, labels] (a 1-label model: [pairs, 1])."""
    s = np.asarray(ce.predict(pairs, batch_size=32, show_progress_bar=False), dtype=np.float32)
    return s.reshape(len(pairs), -1)
