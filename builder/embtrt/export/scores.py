"""The scores head over the pair input, at build time (a part: the reranker and the classifier are
built of it): a *ForSequenceClassification model's logits exported to ONNX and checked against
PyTorch, the serving pair tokenizer checked against the model's, and `ScoresBuild`, the front-door
build both kinds' builds extend with their reference, gate and labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..common.log import Log
from ..errors import ParityError
from ..reference.pairs import corpus_pairs
from .render import _t
from .single import FrontDoorBuild, export_head

LOGIT_TOLERANCE = 1e-4   # the exported graph against PyTorch (fp32): max |logit difference|


def export_classifier(ce, input_names: tuple[str, ...], path: Path, pairs: list[tuple[str, str]], log: Log,
                      trust_remote_code: bool = False, output: str = "logits") -> dict:
    """The *ForSequenceClassification model -> ONNX with output `logits` [rows, labels], dynamic
    rows and length; validated against PyTorch on real pairs at shapes not used for export."""
    import torch
    from transformers import AutoModelForSequenceClassification

    # eager attention exports a graph that masks by the input (SDPA's traced mask can be specialized to the
    # export shape); the validation below compares it with the CrossEncoder's own model
    model = AutoModelForSequenceClassification.from_pretrained(
        str(ce.model.name_or_path), dtype=torch.float32, attn_implementation="eager",
        trust_remote_code=trust_remote_code).eval()
    served = ce.model.eval()
    tok = ce.tokenizer

    class Head(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *args):
            return self.m(**dict(zip(input_names, args))).logits

    sample = tok([p[0] for p in pairs[:2]], [p[1] for p in pairs[:2]], padding=True, truncation="longest_first",
                 max_length=ce.max_seq_length, return_tensors="pt")
    sess = export_head(Head(model), tuple(sample[n] for n in input_names), path, input_names, output)
    worst = 0.0
    for rows in (1, 3, 8):
        batch = pairs[:rows] if rows > 2 else pairs[-rows:]
        enc = tok([p[0] for p in batch], [p[1] for p in batch], padding=True, truncation="longest_first",
                  max_length=ce.max_seq_length, return_tensors="pt")
        with torch.inference_mode():
            want = Head(served)(*(enc[n] for n in input_names)).numpy()
        got = sess.run([output], {n: enc[n].numpy() for n in input_names})[0]
        worst = max(worst, float(np.abs(got - want).max()))
    if worst > LOGIT_TOLERANCE:
        raise ParityError(f"the exported ONNX classifier differs from PyTorch by {worst:.2e} in its logits",
                          "report the model architecture")
    log(f"[ok] ONNX classifier equals PyTorch on real pairs (max |logit difference| {worst:.1e})")
    return {"max_abs_logit_diff": worst, "opset": 17}


def check_pair_tokenizer(hf_tok, tok, pairs: list[tuple[str, str]], log: Log) -> None:
    """The serving pair tokenizer (`tok`, embtrt_backend.pairs.PairTokenizer) gives CrossEncoder's ids
    (and segment ids) on every real pair, the over-long ones cut longest_first at the max length."""
    from embtrt_backend.pairs import DEFAULT

    max_length = tok.max_length
    ours = tok.encode([p[0] for p in pairs], [p[1] for p in pairs], DEFAULT)
    ref = hf_tok([p[0] for p in pairs], [p[1] for p in pairs], truncation="longest_first", max_length=max_length)
    bad = [i for i, a in enumerate(ours.ids) if list(a) != list(ref["input_ids"][i])]
    if "token_type_ids" in ref:
        bad += [i for i, a in enumerate(ours.type_ids) if list(a) != list(ref["token_type_ids"][i])]
    if bad:
        raise ParityError(f"the serving pair tokenizer differs from CrossEncoder's on {len(set(bad))} of {len(pairs)} "
                          f"pairs (first: {pairs[bad[0]][1][:60]!r})", "the tokenizer.json lacks settings of the HF tokenizer")
    cut = int(sum(len(x) == max_length for x in ours.ids))
    log(f"[ok] serving pair tokenizer equals CrossEncoder's on {len(pairs)} pairs ({cut} cut at {max_length} tokens)")


class ScoresBuild(FrontDoorBuild):
    """A front door of scores over pairs (and single texts): the logits exported and checked on real
    pairs, the pair tokenizer checked, SCORES [labels] and TOKENS out. A kind's build adds its kind,
    what it reads, its reference (`load`) and its gate."""

    changes = "scores"
    width = property(lambda self: self.spec.num_labels)

    def pairs(self, texts: list[str]) -> list[tuple[str, str]]:
        """Real pairs of the corpus: the export's validation and the pair tokenizer's check."""
        queries, docs = corpus_pairs(texts)
        return [(q, d) for q, ds in zip(queries, docs) for d in ds]

    def export(self, ce, path: Path, texts: list[str]) -> dict:
        s = self.spec
        return export_classifier(ce, s.input_names, path, self.pairs(texts), self.log, s.trust_remote_code,
                                 self.kind.encoder_output)

    def hf_tokenizer(self, ce):
        return ce.tokenizer

    def check_tokenizer(self, hf_tok, tok_json: Path, pad_id: int, work: Path, texts: list[str]) -> None:
        from embtrt_backend.pairs import PairTokenizer

        self.tok = PairTokenizer(str(tok_json), self.spec.max_seq_length, pad_id)  # the front door's: then the gate's
        check_pair_tokenizer(hf_tok, self.tok, self.pairs(texts), self.log)

    def params(self, pad_id: int) -> dict[str, str]:
        return {**super().params(pad_id), "num_labels": str(self.spec.num_labels), "activation": self.spec.activation}

    def outputs(self) -> list[dict]:
        return [_t("SCORES", "TYPE_FP32", [self.spec.num_labels]), _t("TOKENS", "TYPE_INT64", [1])]

    def manifest_fields(self) -> dict:
        return {"pooling": "none", "pooler": "none", "num_labels": self.spec.num_labels}
