"""`embtrt build` of a reranker (a CrossEncoder folder): the scores head over the pair input
(export.scores: classifier -> ONNX (logits) -> the pair tokenizer) -> the gate against
CrossEncoder.predict / rank -> the front door -> manifest -> check.

The served path is the front door's own pair core (embtrt_backend.pairs) over the encoder the
front door runs (embtrt_backend.encoder, from the same parameters), so the gate judges exactly
what is served. docs/rerankers.md has the contract.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from embtrt_backend.kinds import RERANKER

from ...export.scores import ScoresBuild
from ...reference.modelinfo import default_buckets
from ...reference.pairs import corpus_pairs, load_cross_encoder
from .reference import cross_info
from .reference_gate import judge


def served_scores(core, encoder, queries: list[str], docs: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Every (query, document) pair through the front door's pair core, one request per query
    (batched together as Triton's dynamic batcher would): scores [pairs, labels], tokens per pair."""
    from embtrt_backend.pairs import PairRequest

    opts = core.options({})   # the model's default prompt, as CrossEncoder.predict applies it
    reqs = [PairRequest([q] * len(d), list(d), opts) for q, d in zip(queries, docs)]
    outs = core.run(reqs, encoder)
    for o in outs:
        if o.error is not None:
            raise o.error
    return np.concatenate([o.scores for o in outs]), np.concatenate([o.tokens for o in outs])


class RerankerBuild(ScoresBuild):
    """A CrossEncoder folder's build: the scores head over the pair input (export.scores), CrossEncoder's gate."""

    kind = RERANKER
    exporting = "the classifier to ONNX and validating against PyTorch"
    tokenizer_noun = "pair tokenizer"
    reference = "CrossEncoder.predict (fp32, batch 32) and CrossEncoder.rank"

    def reading(self) -> str:
        s = self.spec
        return (f"a CrossEncoder (reranker: {s.num_labels} label(s), activation {s.activation}, max length "
                f"{s.max_seq_length}, buckets {','.join(map(str, s.buckets))})")

    def load(self):
        return load_cross_encoder(self.spec.model_dir, self.spec.max_seq_length, self.spec.trust_remote_code)

    def gating(self, texts: list[str]) -> str:
        return f"served scores vs CrossEncoder.predict and .rank on {len(self.pairs(texts))} real pairs"

    def gate(self, ce, params: dict[str, str], encoder, work: Path, texts: list[str]) -> dict:
        from embtrt_backend.pairs import PairConfig, PairCore

        core = PairCore(PairConfig.from_parameters(params), self.tok)
        queries, docs = corpus_pairs(texts)
        got, tokens = served_scores(core, encoder, queries, docs)
        return judge(ce, queries, docs, got, tokens, core.cfg.buckets, self.log,
                     precision=self.spec.precision).as_dict(lines=False)


build_reranker_in = RerankerBuild.build_in


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
