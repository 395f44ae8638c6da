"""`embtrt build` of a classifier (a *ForSequenceClassification folder that is not a reranker):
the model's logits -> ONNX -> the tokenizer (single texts and pairs) -> the gate against transformers
in process (reference.py: the logits with the text-classification pipeline's activation) -> the front
door (TEXT, and TEXT_PAIR for pairs) -> manifest -> check. The export and the pair tokenizer are the
scores head's (export.scores, the reranker's too); what differs is the reference, the activation rule and the labels.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import CLASSIFIER

from ...errors import ParityError
from ...export.render import _t
from ...export.scores import ScoresBuild, check_pair_tokenizer
from ...reference.modelinfo import default_buckets
from .reference import classifier_info, gate_inputs, load_classifier, reference_scores
from .reference_gate import judge


class ClassifierBuild(ScoresBuild):
    """A classifier folder's build: its logits, the tokenizer of texts and pairs, transformers' gate."""

    kind = CLASSIFIER
    exporting = "the classifier to ONNX and validating against PyTorch"
    tokenizer_noun = "tokenizer (texts and pairs)"
    reference = "transformers AutoModelForSequenceClassification (fp32) with the text-classification pipeline's activation"

    def reading(self) -> str:
        s = self.spec
        return (f"a classifier ({s.num_labels} label(s): {', '.join(self.labels)}; {s.activation} by default; max "
                f"length {s.max_seq_length}, buckets {','.join(map(str, s.buckets))})")

    @property
    def labels(self) -> tuple[str, ...]:
        if not hasattr(self, "_labels"):
            self._labels = classifier_info(self.load()).labels
        return self._labels

    def load(self):
        if not hasattr(self, "_model"):
            self._model = load_classifier(self.spec.model_dir, self.spec.max_seq_length, self.spec.trust_remote_code)
        return self._model

    def check_tokenizer(self, hf_tok, tok_json: Path, pad_id: int, work: Path, texts: list[str]) -> None:
        from embtrt_backend.pairs import DEFAULT, PairTokenizer

        self.tok = PairTokenizer(str(tok_json), self.spec.max_seq_length, pad_id)
        singles, (firsts, seconds) = gate_inputs(texts)
        check_pair_tokenizer(hf_tok, self.tok, list(zip(firsts, seconds)), self.log)
        ours = self.tok.encode(singles, None, DEFAULT).ids
        ref = hf_tok(singles, truncation=True, max_length=self.spec.max_seq_length)["input_ids"]
        bad = [i for i, (a, b) in enumerate(zip(ours, ref)) if list(a) != list(b)]
        if bad:
            raise ParityError(f"the serving tokenizer differs from the model's on {len(bad)} of {len(singles)} texts "
                              f"(first: {singles[bad[0]][:60]!r})", "the tokenizer.json lacks settings of the HF tokenizer")
        self.log(f"[ok] serving tokenizer equals the model's on {len(singles)} single texts")

    def params(self, pad_id: int) -> dict[str, str]:
        return {**super().params(pad_id), "labels": json.dumps(list(self.labels))}

    def input_tensors(self) -> list[dict]:
        return [_t("TEXT", "TYPE_STRING", [1]), {**_t("TEXT_PAIR", "TYPE_STRING", [1]), "optional": True}]

    def gating(self, texts: list[str]) -> str:
        singles, (firsts, _) = gate_inputs(texts)
        return f"served scores vs transformers on {len(singles)} real texts and {len(firsts)} real pairs"

    def gate(self, model, params: dict[str, str], encoder, work: Path, texts: list[str]) -> dict:
        from embtrt_backend.kinds.classifier.door import ClassifierCore
        from embtrt_backend.pairs import PairConfig

        core = ClassifierCore(PairConfig.from_parameters(params), self.tok)
        got, want, tokens = served_and_reference(core, encoder, model, texts, self.spec.activation)
        return judge(got, want, tokens, core.cfg.buckets, self.log, precision=self.spec.precision,
                     what="texts and pairs (scores and logits)", labels=self.spec.num_labels).as_dict(lines=False)

build_classifier_in = ClassifierBuild.build_in


def served_and_reference(core, encoder, model, texts: list[str], activation: str):
    """The gate's inputs through the front door's core (single texts, and pairs; with the model's activation
    and raw) and through transformers: (served [rows, labels + labels]: each label's score then its logit,
    the reference alike, tokens per row)."""
    from embtrt_backend.pairs import PairRequest

    singles, (firsts, seconds) = gate_inputs(texts)
    opts, raw = core.options({}), core.options({"activation": "raw"})
    outs = core.run([PairRequest(singles, None, opts), PairRequest(firsts, seconds, opts),
                     PairRequest(singles, None, raw), PairRequest(firsts, seconds, raw)], encoder)
    for o in outs:
        if o.error is not None:
            raise o.error
    got = np.hstack([np.concatenate([o.scores for o in outs[:2]]), np.concatenate([o.scores for o in outs[2:]])])
    want = np.hstack([np.concatenate([reference_scores(model, singles, None, activation),
                                      reference_scores(model, firsts, seconds, activation)]),
                      np.concatenate([reference_scores(model, singles, None, "raw"),
                                      reference_scores(model, firsts, seconds, "raw")])])
    return got, want, np.concatenate([o.tokens for o in outs[:2]])


def spec_fields(model_dir: Path, max_seq_length: int | None, bucket_t: tuple[int, ...] | None, trust_remote_code: bool,
                overrides: dict[str, str], default_prompt: str | None, default_name: str | None) -> dict:
    """A classifier's spec fields: its labels, the pipeline's activation, max length and inputs (no prompts)."""
    info = classifier_info(load_classifier(model_dir, max_seq_length, trust_remote_code))
    seq = int(max_seq_length or info.max_length)
    return dict(kind=CLASSIFIER.name, num_labels=info.num_labels, activation=info.activation,
                max_seq_length=seq, buckets=bucket_t or default_buckets(seq), hidden_size=info.num_labels,
                input_names=info.input_names, pooling="cls", normalize=False, pooler="fused",
                prompts=(), default_prompt_name=None, overflow_stride=0)


__all__ = ["ClassifierBuild", "build_classifier_in", "spec_fields"]
