"""`embtrt build` of a reranker (a CrossEncoder folder): classifier -> ONNX (logits) -> the pair
tokenizer -> the gate against CrossEncoder.predict / rank -> the front door -> manifest -> check.

The served path is the front door's own pair core (embtrt_backend.kinds.reranker.pairs) over the encoder the
front door runs (embtrt_backend.encoder, from the same parameters), so the gate judges exactly
what is served. docs/rerankers.md has the contract.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from embtrt_backend.kinds import RERANKER

from ...common.log import Log
from ...errors import ParityError
from ...reference.modelinfo import default_buckets
from .reference import corpus_pairs, cross_info, load_cross_encoder
from .reference_gate import SCORE_TOLERANCE, judge
from ...export.render import _t
from ...export.single import FrontDoorBuild, export_head


def export_classifier(ce, input_names: tuple[str, ...], path: Path, pairs: list[tuple[str, str]], log: Log,
                      trust_remote_code: bool = False) -> dict:
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
    sess = export_head(Head(model), tuple(sample[n] for n in input_names), path, input_names, RERANKER.encoder_output)
    worst = 0.0
    for rows in (1, 3, 8):
        batch = pairs[:rows] if rows > 2 else pairs[-rows:]
        enc = tok([p[0] for p in batch], [p[1] for p in batch], padding=True, truncation="longest_first",
                  max_length=ce.max_seq_length, return_tensors="pt")
        with torch.inference_mode():
            want = Head(served)(*(enc[n] for n in input_names)).numpy()
        got = sess.run([RERANKER.encoder_output], {n: enc[n].numpy() for n in input_names})[0]
        worst = max(worst, float(np.abs(got - want).max()))
    if worst > SCORE_TOLERANCE:
        raise ParityError(f"the exported ONNX classifier differs from PyTorch by {worst:.2e} in its logits",
                          "report the model architecture")
    log(f"[ok] ONNX classifier equals PyTorch on real pairs (max |logit difference| {worst:.1e})")
    return {"max_abs_logit_diff": worst, "opset": 17}


def served_scores(core, encoder, queries: list[str], docs: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Every (query, document) pair through the front door's pair core, one request per query
    (batched together as Triton's dynamic batcher would): scores [pairs, labels], tokens per pair."""
    from embtrt_backend.kinds.reranker.pairs import PairRequest

    opts = core.options({})   # the model's default prompt, as CrossEncoder.predict applies it
    reqs = [PairRequest([q] * len(d), list(d), opts) for q, d in zip(queries, docs)]
    outs = core.run(reqs, encoder)
    for o in outs:
        if o.error is not None:
            raise o.error
    return np.concatenate([o.scores for o in outs]), np.concatenate([o.tokens for o in outs])


class RerankerBuild(FrontDoorBuild):
    """A CrossEncoder folder's build: its classifier's logits, the pair tokenizer, CrossEncoder's gate."""

    kind, changes = RERANKER, "scores"
    exporting = "the classifier to ONNX and validating against PyTorch"
    tokenizer_noun = "pair tokenizer"
    reference = "CrossEncoder.predict (fp32, batch 32) and CrossEncoder.rank"
    width = property(lambda self: self.spec.num_labels)

    def reading(self) -> str:
        s = self.spec
        return (f"a CrossEncoder (reranker: {s.num_labels} label(s), activation {s.activation}, max length "
                f"{s.max_seq_length}, buckets {','.join(map(str, s.buckets))})")

    def load(self):
        return load_cross_encoder(self.spec.model_dir, self.spec.max_seq_length, self.spec.trust_remote_code)

    def _pairs(self, texts: list[str]) -> list[tuple[str, str]]:
        queries, docs = corpus_pairs(texts)
        return [(q, d) for q, ds in zip(queries, docs) for d in ds]

    def export(self, ce, path: Path, texts: list[str]) -> dict:
        s = self.spec
        return export_classifier(ce, s.input_names, path, self._pairs(texts), self.log, s.trust_remote_code)

    def hf_tokenizer(self, ce):
        return ce.tokenizer

    def check_tokenizer(self, hf_tok, tok_json: Path, pad_id: int, work: Path, texts: list[str]) -> None:
        from embtrt_backend.kinds.reranker.pairs import PairTokenizer

        self.tok = PairTokenizer(str(tok_json), self.spec.max_seq_length, pad_id)  # the front door's: then the gate's
        check_pair_tokenizer(hf_tok, self.tok, self._pairs(texts), self.log)

    def params(self, pad_id: int) -> dict[str, str]:
        return {**super().params(pad_id), "num_labels": str(self.spec.num_labels), "activation": self.spec.activation}

    def gating(self, texts: list[str]) -> str:
        return f"served scores vs CrossEncoder.predict and .rank on {len(self._pairs(texts))} real pairs"

    def gate(self, ce, params: dict[str, str], encoder, work: Path, texts: list[str]) -> dict:
        from embtrt_backend.kinds.reranker.pairs import PairConfig, PairCore

        core = PairCore(PairConfig.from_parameters(params), self.tok)
        queries, docs = corpus_pairs(texts)
        got, tokens = served_scores(core, encoder, queries, docs)
        return judge(ce, queries, docs, got, tokens, core.cfg.buckets, self.log,
                     precision=self.spec.precision).as_dict(lines=False)

    def outputs(self) -> list[dict]:
        return [_t("SCORES", "TYPE_FP32", [self.spec.num_labels]), _t("TOKENS", "TYPE_INT64", [1])]

    def manifest_fields(self) -> dict:
        return {"pooling": "none", "pooler": "none", "num_labels": self.spec.num_labels}


build_reranker_in = RerankerBuild.build_in


def check_pair_tokenizer(hf_tok, tok, pairs: list[tuple[str, str]], log: Log) -> None:
    """The serving pair tokenizer (`tok`, embtrt_backend.kinds.reranker.pairs.PairTokenizer) gives CrossEncoder's ids
    (and segment ids) on every real pair, the over-long ones cut longest_first at the max length."""
    from embtrt_backend.kinds.reranker.pairs import DEFAULT

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


def spec_fields(model_dir: Path, max_seq_length: int | None, bucket_t: tuple[int, ...] | None, trust_remote_code: bool,
                overrides: dict[str, str], default_prompt: str | None, default_name: str | None) -> dict:
    """A cross-encoder's spec fields: what CrossEncoder reads of the folder (max length, labels,
    activation, the tokenizer's inputs) fills it (export.spec_options.spec_from_options sets them: Kind.spec_fields);
    the embedder's pooling fields do not apply; the options' prompts do not apply either."""
    ce = load_cross_encoder(model_dir, max_seq_length, trust_remote_code)
    info = cross_info(ce)
    seq = int(max_seq_length or info.max_length)
    return dict(kind=RERANKER.name, num_labels=info.num_labels, activation=info.activation,
                max_seq_length=seq, buckets=bucket_t or default_buckets(seq), hidden_size=info.num_labels,
                input_names=info.input_names, pooling="cls", normalize=False, pooler="fused",
                prompts=tuple((str(k), str(v)) for k, v in (ce.prompts or {}).items()),
                default_prompt_name=ce.default_prompt_name, overflow_stride=0)
