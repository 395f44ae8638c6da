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

from ...export.scores import ScoresBuild, require_same_tokens
from ...reference.modelinfo import default_buckets
from ...reference.pairs import corpus_pairs, load_cross_encoder
from .reference import cross_info
from .reference_gate import judge
from .reference_llm import TemplatedReference, logit_score, reference_of


def served_scores(core, encoder, queries: list[str], docs: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Every (query, document) pair through the front door's pair core, one request per query
    (batched together as Triton's dynamic batcher would): scores [pairs, labels], tokens per pair."""
    from embtrt_backend.pairs import PairRequest

    opts = core.options({})   # the model's default prompt (or template instruction), as the reference applies it
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
        template = ", an LLM-style reranker's prompt template (instruction a request option)" if s.pair_template else ""
        return (f"a CrossEncoder (reranker: {s.num_labels} label(s), activation {s.activation}, max length "
                f"{s.max_seq_length}, buckets {','.join(map(str, s.buckets))}{template})")

    def load(self):
        return load_cross_encoder(self.spec.model_dir, self.spec.max_seq_length, self.spec.trust_remote_code)

    def params(self, pad_id: int) -> dict[str, str]:
        """The scores head's, and an LLM-style reranker's "yes" and "no" ids (python-torch scores with them)."""
        ref = getattr(self, "ref", None)   # the build's CrossEncoder (FrontDoorBuild.build_in keeps it); none outside one
        score = logit_score(ref) if ref is not None else None
        extra = {} if score is None else {"score_tokens": f"{score.true_token_id},{score.false_token_id}"}
        return {**super().params(pad_id), **extra}

    def check_tokenizer(self, hf_tok, tok_json: Path, pad_id: int, work: Path, texts: list[str]) -> None:
        """The pair tokenizer's check, and with a prompt template its ids against the reference's (the model
        card's: middle cut to the room the prefix and suffix leave) on every real pair."""
        super().check_tokenizer(hf_tok, tok_json, pad_id, work, texts)
        if not self.spec.pair_template:
            return
        from embtrt_backend.pair_template import PairTemplate
        from embtrt_backend.pairs import DEFAULT

        template = PairTemplate.from_json(self.spec.pair_template)
        pairs = self.pairs(texts)
        ours = self.tok.encode_template(template, [p[0] for p in pairs], [p[1] for p in pairs], DEFAULT).ids
        require_same_tokens(pairs, "the prompt template's tokens differ from the reference's",
                            (ours, TemplatedReference(self.ref, template).token_ids(pairs)))
        cut = sum(len(x) == self.spec.max_seq_length for x in ours)
        self.log(f"[ok] prompt template's tokens equal the reference's (Qwen3-Reranker's model card rule) on {len(pairs)} "
                 f"pairs ({cut} cut at {self.spec.max_seq_length} tokens, prefix and suffix kept)")

    def gating(self, texts: list[str]) -> str:
        return f"served scores vs CrossEncoder.predict and .rank on {len(self.pairs(texts))} real pairs"

    def gate(self, ce, params: dict[str, str], encoder, work: Path, texts: list[str]) -> dict:
        from embtrt_backend.pairs import PairConfig, PairCore

        core = PairCore(PairConfig.from_parameters(params), self.tok)
        queries, docs = corpus_pairs(texts)
        got, tokens = served_scores(core, encoder, queries, docs)
        return judge(reference_of(ce, self.spec.pair_template), queries, docs, got, tokens, core.cfg.buckets, self.log,
                     precision=self.spec.precision).as_dict(lines=False)


build_reranker_in = RerankerBuild.build_in


def spec_fields(model_dir: Path, max_seq_length: int | None, bucket_t: tuple[int, ...] | None, trust_remote_code: bool,
                overrides: dict[str, str], default_prompt: str | None, default_name: str | None) -> dict:
    """A cross-encoder's spec fields: what CrossEncoder reads of the folder (max length, labels,
    activation, the tokenizer's inputs) fills it (export.spec_options.spec_from_options sets them: Kind.spec_fields);
    the embedder's pooling fields do not apply; the options' prompts do not apply either. A causal-LM
    reranker (CrossEncoder's LogitScore) takes Qwen3-Reranker's prompt template by default."""
    from embtrt_backend.pair_template import QWEN3_RERANKER

    ce = load_cross_encoder(model_dir, max_seq_length, trust_remote_code)
    info = cross_info(ce)
    seq = int(max_seq_length or info.max_length)
    llm = logit_score(ce) is not None
    return dict(kind=RERANKER.name, num_labels=info.num_labels, activation=info.activation,
                max_seq_length=seq, buckets=bucket_t or default_buckets(seq), hidden_size=info.num_labels,
                input_names=info.input_names, pooling="cls", normalize=False, pooler="fused",
                prompts=() if llm else tuple((str(k), str(v)) for k, v in (ce.prompts or {}).items()),
                default_prompt_name=None if llm else ce.default_prompt_name, overflow_stride=0,
                pair_template=QWEN3_RERANKER.to_json() if llm else "")
