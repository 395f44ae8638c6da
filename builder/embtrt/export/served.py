"""The served path's vectors, computed here the way the repository will compute them: the
serving tokenizer, length routing, padding to the bucket and the same encoder factory the
Python-backend models use. The parity gate compares these with the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..common.backend import backend_lib
from ..reference.parity import bucket_label
from .render import runtime_params
from .spec import BuildSpec


def encoder_vectors(spec: BuildSpec, onnx_by_bucket: dict[int, Path | None], tokenizer_json: Path, pad_id: int,
                    output_name: str, texts: list[str],
                    sessions: dict[object, object] | None = None,
                    extra_params: dict[str, str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Embed texts exactly as the per-bucket ensembles do: the model's default prompt prepended (as
    SentenceTransformer.encode does without options), pad to the bucket, run its encoder through
    the same factory the Python-backend models use, pool leaving the prompt's tokens out where the
    model says so. The encoders it creates are left in `sessions` (keyed by their ONNX file) for
    the caller to reuse. Bucket labels are by the texts' own token counts."""
    text_mod, enc_mod = backend_lib()
    from embtrt_backend.options import prompt_length
    from embtrt_backend.pooling import exclude_prefix, pool_and_normalize
    from embtrt_backend.routing import plan

    tok = text_mod.TextTokenizer(str(tokenizer_json), spec.max_seq_length, pad_id, "truncate")
    prompt = spec.default_prompt
    enc = tok.encode([prompt + t for t in texts] if prompt else texts)
    skip = 0 if spec.include_prompt else prompt_length(tok.tok, prompt)
    untruncated = text_mod.TextTokenizer(str(tokenizer_json), 1 << 20, pad_id, "truncate").encode(texts).lengths
    labels = [bucket_label(int(n), spec.buckets, spec.max_seq_length) for n in untruncated]
    out = np.zeros((len(texts), spec.hidden_size), dtype=np.float32)
    params = {**dict(runtime_params(spec, output_name)), **(extra_params or {})}
    sessions = {} if sessions is None else sessions
    for b, rows in plan(enc.lengths, spec.buckets, [min(16, spec.bucket_max_batch(L)) for L in spec.buckets]):
        L = spec.buckets[b]
        key = onnx_by_bucket[L]
        if key not in sessions:
            sessions[key] = enc_mod.make_encoder(params, str(key) if key else None, str(spec.model_dir),
                                                 spec.trust_remote_code)
        feeds = tok.pad(enc, rows, L, spec.input_names)
        res = sessions[key].run(feeds)  # type: ignore[attr-defined]
        if not spec.fused:
            res = pool_and_normalize(res, exclude_prefix(feeds["attention_mask"], skip), spec.pooling, spec.normalize)
        out[rows] = res
    return out, labels
