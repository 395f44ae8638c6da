"""An LLM-style reranker's reference (#71): sentence-transformers' CrossEncoder holds the model (a causal LM
under LogitScore: logit["yes"] - logit["no"] at the last token, left padding; or its sequence-classification
conversion), and the pair goes through the prompt template as Qwen3-Reranker's model card does it: the
middle tokenized by the folder's own transformers tokenizer and cut to the max length less the prefix and
suffix tokens, prefix + middle + suffix, padded on the left, the model's score at the last token, then
CrossEncoder's activation (sigmoid: P("yes") of the card's softmax over "no" and "yes").

`TemplatedReference` answers `predict` as CrossEncoder does, so that the reranker's gate and `embtrt verify`
judge a templated model with the same code (reference_gate.judge)."""

from __future__ import annotations

import numpy as np
from embtrt_backend.pair_template import PairTemplate


def logit_score(ce):
    """The CrossEncoder's LogitScore module (a causal-LM reranker), or None (a sequence classifier)."""
    from sentence_transformers.cross_encoder.modules.logit_score import LogitScore

    return next((m for m in ce if isinstance(m, LogitScore)), None)


class TemplatedReference:
    """CrossEncoder.predict over pairs put through `template` (its own instruction; see the module's docstring)."""

    def __init__(self, ce, template: PairTemplate) -> None:
        self.ce, self.template = ce, template

    def __getattr__(self, name: str):   # everything else (tokenizer, model, rank's callers) is the CrossEncoder's
        return getattr(self.ce, name)

    def token_ids(self, pairs: list[tuple[str, str]]) -> list[list[int]]:
        tok = self.ce.tokenizer
        prefix = tok.encode(self.template.prefix, add_special_tokens=False)
        suffix = tok.encode(self.template.suffix, add_special_tokens=False)
        texts = [self.template.text(q, d) for q, d in pairs]
        mid = tok(texts, padding=False, truncation="longest_first", return_attention_mask=False,
                  max_length=int(self.ce.max_seq_length) - len(prefix) - len(suffix))["input_ids"]
        return [prefix + ids + suffix for ids in mid]

    def predict(self, pairs, batch_size: int = 32, show_progress_bar: bool = False, **_: object) -> np.ndarray:
        import torch

        score = logit_score(self.ce)
        tok, model = self.ce.tokenizer, self.ce.model.eval()
        ids = self.token_ids(list(pairs))
        out = []
        for i in range(0, len(ids), batch_size):
            batch = tok.pad({"input_ids": ids[i:i + batch_size]}, padding=True, return_tensors="pt",
                            padding_side="left")
            with torch.inference_mode():
                if score is not None:
                    last = model(**batch, logits_to_keep=1).logits[:, -1]
                    logits = last[:, score.true_token_id:score.true_token_id + 1]
                    if score.false_token_id is not None:
                        logits = logits - last[:, score.false_token_id:score.false_token_id + 1]
                else:
                    logits = model(**batch).logits
                act = self.ce.activation_fn
                out.append((act(logits) if act is not None else logits).float().numpy())
        s = np.concatenate(out) if out else np.zeros((0, 1), np.float32)
        return s[:, 0] if s.shape[1] == 1 else s


def reference_of(ce, template_json: str):
    """The gate's and verify's reference of a reranker built with `pair_template` (JSON; empty: the
    CrossEncoder itself)."""
    template = PairTemplate.from_json(template_json)
    return ce if template is None else TemplatedReference(ce, template)
