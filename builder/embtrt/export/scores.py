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
    rows and length; validated against PyTorch on real pairs at shapes not used for export. A causal-LM
    reranker (CrossEncoder's LogitScore) exports its one score row instead (`yes_no_head`)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    score = next((m for m in ce if type(m).__name__ == "LogitScore"), None)
    if score is not None:
        return export_yes_no(ce, score, input_names, path, pairs, log, trust_remote_code, output)
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


def yes_no_head(lm, true_id: int, false_id: int | None, input_names: tuple[str, ...]):
    """A causal LM's score as one row: the decoder's last real token (the last position whose attention mask is 1,
    either padding side) times lm_head[yes] - lm_head[no] (LogitScore's log-odds), so that no vocabulary-wide
    output leaves the graph: [rows, 1]."""
    import torch

    head = lm.get_output_embeddings()
    row = head.weight[true_id] - (head.weight[false_id] if false_id is not None else 0)
    bias = getattr(head, "bias", None)
    shift = 0.0 if bias is None else float(bias[true_id] - (bias[false_id] if false_id is not None else 0))

    class YesNo(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.decoder = lm.get_decoder()
            self.register_buffer("row", row.detach().clone().reshape(-1, 1))

        def forward(self, *args):
            feeds = dict(zip(input_names, args))
            hidden = self.decoder(**feeds).last_hidden_state
            mask = feeds["attention_mask"]
            positions = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0) * mask
            last = hidden[torch.arange(hidden.shape[0], device=hidden.device), positions.argmax(dim=1)]
            return last @ self.row + shift

    return YesNo().eval()


def export_yes_no(ce, score, input_names: tuple[str, ...], path: Path, pairs: list[tuple[str, str]], log: Log,
                  trust_remote_code: bool, output: str) -> dict:
    """A causal-LM reranker -> ONNX with `output` [rows, 1]: yes_no_head over the folder's model (eager attention),
    validated against the CrossEncoder's own LogitScore (its model's logits at the last position of left-padded
    pairs, logit[yes] - logit[no]) on real pairs."""
    import torch
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(str(ce.model.name_or_path), dtype=torch.float32, attn_implementation="eager",
                                              trust_remote_code=trust_remote_code).eval()
    head = yes_no_head(lm, score.true_token_id, score.false_token_id, input_names)
    tok = ce.tokenizer

    def enc(batch, side: str = "right"):   # the front door pads right; the CrossEncoder pads a causal LM's left
        return tok([p[0] for p in batch], [p[1] for p in batch], padding=True, truncation="longest_first",
                   max_length=ce.max_seq_length, return_tensors="pt", padding_side=side)

    sample = enc(pairs[:2])
    sess = export_head(head, tuple(sample[n] for n in input_names), path, input_names, output)
    worst = 0.0
    for rows in (1, 3, 8):
        batch = pairs[:rows] if rows > 2 else pairs[-rows:]
        left = enc(batch, "left")
        with torch.inference_mode():
            last = ce.model.eval()(**{n: left[n] for n in input_names}).logits[:, -1]
        want = last[:, score.true_token_id] - (last[:, score.false_token_id] if score.false_token_id is not None else 0)
        right = enc(batch)
        got = sess.run([output], {n: right[n].numpy() for n in input_names})[0]
        worst = max(worst, float(np.abs(got[:, 0] - want.numpy()).max()))
    if worst > LOGIT_TOLERANCE:
        raise ParityError(f"the exported ONNX yes/no score differs from the CrossEncoder's LogitScore by {worst:.2e}",
                          "report the model architecture")
    log(f"[ok] ONNX score row (lm_head yes - no at the last token) equals the CrossEncoder's LogitScore on real pairs, "
        f"right padding against its left (max |difference| {worst:.1e})")
    return {"max_abs_logit_diff": worst, "opset": 17, "head": "last-token yes - no"}


def require_same_tokens(pairs: list[tuple[str, str]], what: str, *compared: tuple[list, list]) -> None:
    """Each (ours, the reference's) list of per-pair token rows equal, or a ParityError saying `what`, on how many
    pairs and the first of them."""
    bad = sorted({i for ours, ref in compared for i, (a, b) in enumerate(zip(ours, ref, strict=True)) if list(a) != list(b)})
    if bad:
        raise ParityError(f"{what} on {len(bad)} of {len(pairs)} pairs (first: {pairs[bad[0]][1][:60]!r})",
                          "the tokenizer.json lacks settings of the HF tokenizer")


def check_pair_tokenizer(hf_tok, tok, pairs: list[tuple[str, str]], log: Log) -> None:
    """The serving pair tokenizer (`tok`, embtrt_backend.pairs.PairTokenizer) gives CrossEncoder's ids
    (and segment ids) on every real pair, the over-long ones cut longest_first at the max length."""
    from embtrt_backend.pairs import DEFAULT

    max_length = tok.max_length
    ours = tok.encode([p[0] for p in pairs], [p[1] for p in pairs], DEFAULT)
    ref = hf_tok([p[0] for p in pairs], [p[1] for p in pairs], truncation="longest_first", max_length=max_length)
    compared = [(ours.ids, ref["input_ids"])] + ([(ours.type_ids, ref["token_type_ids"])] if "token_type_ids" in ref else [])
    require_same_tokens(pairs, "the serving pair tokenizer differs from CrossEncoder's", *compared)
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
        template = {"pair_template": self.spec.pair_template} if self.spec.pair_template else {}
        return {**super().params(pad_id), "num_labels": str(self.spec.num_labels), "activation": self.spec.activation,
                **template}

    def outputs(self) -> list[dict]:
        return [_t("SCORES", "TYPE_FP32", [self.spec.num_labels]), _t("TOKENS", "TYPE_INT64", [1])]

    def manifest_fields(self) -> dict:
        return {"pooling": "none", "pooler": "none", "num_labels": self.spec.num_labels}
