"""The served path's vectors, computed here the way the repository will compute them: the
serving tokenizer, length routing, padding to the bucket and the same encoder factory the
Python-backend models use. The parity gate compares these with the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..common.backend import backend_lib
from ..reference.parity import bucket_label
from .render import runtime_params
from .single import GateEncoder
from .spec import BuildSpec


def encoder_vectors(spec: BuildSpec, onnx_by_bucket: dict[int, Path | None], tokenizer_json: Path, pad_id: int,
                    output_name: str, texts: list[str], extra_params: dict[str, str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Embed texts exactly as the per-bucket ensembles do: the model's default prompt prepended (as
    SentenceTransformer.encode does without options), pad to the bucket, run its encoder through
    the same factory the Python-backend models use, pool leaving the prompt's tokens out where the
    model says so. Bucket labels are by the texts' own token counts."""
    text_mod, _ = backend_lib()
    from embtrt_backend.core import CoreConfig, Request, RequestCore
    from embtrt_backend.options import ModelOptions

    tok = text_mod.TextTokenizer(str(tokenizer_json), spec.max_seq_length, pad_id, "truncate")
    # the bucket ensembles' path: every row padded to its bucket, the model's default prompt
    cfg = CoreConfig(buckets=tuple(spec.buckets), max_batch=tuple(min(16, spec.bucket_max_batch(L)) for L in spec.buckets),
                     input_names=tuple(spec.input_names), dim=spec.hidden_size, fused=spec.fused, pooling=spec.pooling,
                     normalize=spec.normalize, pad_to_bucket=True)
    options = ModelOptions(dim=spec.hidden_size, normalize=spec.normalize, prompts=dict(spec.prompts),
                           default_prompt_name=spec.default_prompt_name, include_prompt=spec.include_prompt)
    core = RequestCore(cfg, tok, options)
    untruncated = text_mod.TextTokenizer(str(tokenizer_json), 1 << 20, pad_id, "truncate").encode(texts).lengths
    labels = [bucket_label(int(n), spec.buckets, spec.max_seq_length) for n in untruncated]
    params = {**dict(runtime_params(spec, output_name)), **(extra_params or {})}
    encoder = GateEncoder(spec, params, onnx_by_bucket)   # one encoder per distinct graph
    (out,) = core.run([Request(list(texts), None, options.default)], encoder)
    if out.error is not None:
        raise out.error
    assert out.vectors is not None
    return out.vectors, labels
