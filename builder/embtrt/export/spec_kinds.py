"""The spec fields of a reranker or a sparse encoder: what CrossEncoder / SparseEncoder read of the
folder, which export.spec.spec_from_options sets on the BuildSpec it made from the options."""

from __future__ import annotations

from pathlib import Path

from embtrt_backend.kinds import RERANKER, SPARSE

from ..reference.modelinfo import default_buckets


def reranker_fields(model_dir: Path, max_seq_length: int | None, bucket_t: tuple[int, ...] | None,
                    trust_remote_code: bool) -> dict:
    """A cross-encoder's spec fields: what CrossEncoder reads of the folder (max length, labels,
    activation, the tokenizer's inputs) fills it; the embedder's pooling fields do not apply."""
    from ..kinds.reranker.reference import cross_info, load_cross_encoder

    ce = load_cross_encoder(model_dir, max_seq_length, trust_remote_code)
    info = cross_info(ce)
    seq = int(max_seq_length or info.max_length)
    return dict(kind=RERANKER.name, num_labels=info.num_labels, activation=info.activation,
                max_seq_length=seq, buckets=bucket_t or default_buckets(seq), hidden_size=info.num_labels,
                input_names=info.input_names, pooling="cls", normalize=False, pooler="fused",
                prompts=tuple((str(k), str(v)) for k, v in (ce.prompts or {}).items()),
                default_prompt_name=ce.default_prompt_name, overflow_stride=0)


def sparse_fields(model_dir: Path, max_seq_length: int | None, bucket_t: tuple[int, ...] | None,
                  overrides: dict[str, str], default_prompt: str | None, default_name: str | None,
                  trust_remote_code: bool) -> dict:
    """A SPLADE SparseEncoder's spec fields: max length, vocabulary, pooling and activation from the folder."""
    from ..kinds.sparse.reference import load_sparse_encoder, splade_info

    se = load_sparse_encoder(model_dir, trust_remote_code)   # its own prompts (read_st_prompts converts it)
    info = splade_info(se, model_dir)
    seq = int(max_seq_length or info.max_length)
    prompts = {**{str(k): str(v) for k, v in (se.prompts or {}).items()}, **overrides}
    model_default = default_name if default_prompt is not None else se.default_prompt_name
    return dict(kind=SPARSE.name, activation=info.activation, splade_pooling=info.pooling,
                sparse_encoder_dir=info.encoder_dir, sparse_query_max_length=info.query_max_length,
                sparse_max_active_dims=int(getattr(se, "max_active_dims", None) or 0),
                max_seq_length=seq, buckets=bucket_t or default_buckets(seq), hidden_size=info.vocab,
                input_names=info.input_names, pooling="cls", normalize=False, pooler="fused",
                prompts=tuple(prompts.items()), default_prompt_name=model_default, overflow_stride=0)
