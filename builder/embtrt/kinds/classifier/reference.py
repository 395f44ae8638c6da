"""The classifier's reference: transformers' AutoModelForSequenceClassification in process, with the
activation transformers' text-classification pipeline applies (and TEI's rule where they agree):

- softmax over the labels where the model has several and its `problem_type` is not
  `multi_label_classification`;
- sigmoid per label for one label (TEI's rule too) and for `multi_label_classification` (TEI applies
  softmax there: embtrt follows transformers, docs/classifiers.md);
- `raw` (TEI's raw_scores, vLLM's use_activation false): the logits.

The model and tokenizer are loaded through sentence-transformers' CrossEncoder, which holds exactly
transformers' AutoModelForSequenceClassification and AutoTokenizer of the folder (and its max length);
the scores are the model's own logits, never CrossEncoder's activation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...reference.detect import sequence_head, st_model_type
from ...reference.pairs import load_cross_encoder


def classifier_rule(path: Path) -> tuple[bool, str]:
    """Detection (embtrt_backend.kinds.DETECTION): a *ForSequenceClassification architecture of several
    labels that sentence-transformers did not save as a CrossEncoder."""
    head = sequence_head(path)
    if head is None:
        return False, "no *ForSequenceClassification architecture in config.json"
    if head.labels == 1 or head.cross_encoder_mark or st_model_type(path) == "CrossEncoder":
        return False, f"config.json names {head.architecture}, but of one label or saved as a CrossEncoder"
    return True, (f"config.json names the architecture {head.architecture} with {head.labels} labels and no "
                  "config_sentence_transformers.json saying CrossEncoder (a classifier)")


@dataclass(frozen=True)
class ClassifierInfo:
    num_labels: int
    labels: tuple[str, ...]      # by label id
    activation: str              # softmax | sigmoid: the pipeline's default
    problem_type: str | None
    max_length: int
    input_names: tuple[str, ...]


def activation_for(num_labels: int, problem_type: str | None) -> str:
    """transformers' text-classification pipeline default: sigmoid for one label or multi-label, else softmax."""
    return "sigmoid" if num_labels == 1 or problem_type == "multi_label_classification" else "softmax"


def classifier_info(model) -> ClassifierInfo:
    cfg = model.model.config
    n = int(cfg.num_labels)
    id2label = getattr(cfg, "id2label", None) or {}
    labels = tuple(str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n))
    probe = model.tokenizer("a", "b")
    names = tuple(x for x in ("input_ids", "attention_mask", "token_type_ids") if x in probe)
    problem = getattr(cfg, "problem_type", None)
    return ClassifierInfo(n, labels, activation_for(n, problem), problem, int(model.max_seq_length), names)


def load_classifier(path: Path, max_length: int | None = None, trust_remote_code: bool = False):
    return load_cross_encoder(path, max_length, trust_remote_code)


def hf_logits(model, texts: list[str], pairs: list[str] | None = None, batch_size: int = 32) -> np.ndarray:
    """The model's logits [rows, labels] in fp32: texts alone, or (texts[i], pairs[i]), tokenized by its
    tokenizer with truncation at the max length (longest_first for pairs)."""
    import torch

    tok, m = model.tokenizer, model.model.eval()
    out = []
    for i in range(0, len(texts), batch_size):
        a = texts[i:i + batch_size]
        b = pairs[i:i + batch_size] if pairs is not None else None
        enc = tok(a, b, padding=True, truncation=True, max_length=model.max_seq_length, return_tensors="pt")
        with torch.inference_mode():
            out.append(m(**enc).logits.float().numpy())
    return np.concatenate(out).astype(np.float32)


def reference_scores(model, texts: list[str], pairs: list[str] | None, activation: str) -> np.ndarray:
    """hf_logits, then the activation (raw, softmax or sigmoid) in torch, as the pipeline applies it: the
    served code's own activation is not the reference's."""
    import torch

    logits = torch.from_numpy(hf_logits(model, texts, pairs))
    if activation == "softmax":
        return torch.softmax(logits, dim=-1).numpy()
    if activation == "sigmoid":
        return torch.sigmoid(logits).numpy()
    return logits.numpy()


def gate_inputs(texts: list[str], n: int = 48) -> tuple[list[str], tuple[list[str], list[str]]]:
    """Real single texts (short and long ones, one over the max length) and real pairs (a short text's
    first clause with another text) from the calibration corpus; a corpus under 2n + 1 texts (`verify
    --corpus` of a few texts) pairs each text's first clause with the next text, so there are always pairs."""
    singles = texts[:n - 1] + [" ".join(texts[:12])]
    firsts = [t.split(".")[0][:120] for t in texts[n:2 * n]]
    seconds = texts[2 * n:3 * n] or texts[:n]
    if not firsts or not seconds:
        firsts, seconds = [t.split(".")[0][:120] for t in texts[:n]], (texts[1:] + texts[:1])[:n]
    k = min(len(firsts), len(seconds))
    return singles, (firsts[:k], seconds[:k])
