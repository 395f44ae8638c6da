"""Hugging Face model -> ONNX encoder, with the pooling + L2 head fused into the graph.

Exports with batch and sequence dynamic, then validates ONNX Runtime against PyTorch on
real text at shapes not used for the export (like optimum's exporter), with a verdict
per output. A mismatch is an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ParityError
from ..reference.parity import CosineStats, cosine_rows
from ..reference.torch_ref import load_hf, torch_pool
from .spec import LONG_INPUT, BuildSpec

EXPORT_BATCH, EXPORT_SEQ = 2, 16


@dataclass(frozen=True)
class OnnxArtifact:
    path: Path
    output_name: str          # "embedding" [B, H] when fused, "last_hidden_state" [B, S, H]
    input_names: tuple[str, ...]
    validation: dict


def _wrapper(model, spec: BuildSpec):
    import torch
    import torch.nn.functional as F

    names = spec.input_names
    fused, pooling, normalize = spec.fused, spec.pooling, spec.normalize

    class EmbeddingHead(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):
            kw = dict(zip(names, args))
            hidden = self.model(**kw).last_hidden_state
            if not fused:
                return hidden
            vec = torch_pool(hidden, kw["attention_mask"], pooling)
            return F.normalize(vec, p=2, dim=1) if normalize else vec

    return EmbeddingHead().eval()


def export(spec: BuildSpec, workdir: Path, texts: list[str], log=print) -> OnnxArtifact:
    import torch

    tok, model = load_hf(spec.model_dir, spec.trust_remote_code)
    head = _wrapper(model, spec)
    names = spec.input_names
    out_name = "embedding" if spec.fused else "last_hidden_state"
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "model.onnx"

    sample = tok(["embtrt export sample"] * EXPORT_BATCH, padding="max_length", max_length=EXPORT_SEQ,
                 truncation=True, return_tensors="pt")
    args = tuple(sample[n] if n in sample else torch.zeros_like(sample["input_ids"]) for n in names)
    dyn = {n: {0: "batch", 1: "sequence"} for n in names}
    dyn[out_name] = {0: "batch"} if spec.fused else {0: "batch", 1: "sequence"}
    log(f"exporting {spec.model_dir.name} to ONNX (opset {spec.opset}, output {out_name})")
    import warnings

    with torch.inference_mode(), warnings.catch_warnings():
        # Tracer warnings about Python control flow on shapes: the export is validated below
        # on shapes not used for export, which is the check that matters.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            head, args, str(path), input_names=list(names), output_names=[out_name],
            dynamic_axes=dyn, opset_version=spec.opset, do_constant_folding=True, dynamo=False,
        )
    import onnx

    onnx.checker.check_model(str(path), full_check=False)
    graph_inputs = tuple(i.name for i in onnx.load(str(path), load_external_data=False).graph.input)
    extra = [n for n in graph_inputs if n not in names]
    if extra:
        raise ParityError(f"the exported graph of {spec.model_dir.name} takes {', '.join(extra)}, which the tokenizer "
                          f"does not give (it gives {', '.join(names)})", "report the model architecture")
    if graph_inputs != tuple(names):
        # The graph decides what is fed and served: an input the model ignores is dropped by the export.
        log(f"the exported graph takes {', '.join(graph_inputs)} (the tokenizer also gives "
            f"{', '.join(n for n in names if n not in graph_inputs)}, which the model does not use)")
        spec = spec.with_(input_names=graph_inputs)
        head = _wrapper(model, spec)
    validation = validate(spec, path, tok, head, out_name, texts, log=log)
    (workdir / "export.json").write_text(json.dumps({
        "command": "torch.onnx.export(dynamo=False)", "opset": spec.opset, "inputs": list(names),
        "output": out_name, "export_shape": [EXPORT_BATCH, EXPORT_SEQ], "validation": validation,
    }, indent=2))
    return OnnxArtifact(path, out_name, tuple(spec.input_names), validation)


def _shapes(spec: BuildSpec) -> list[tuple[int, int | None]]:
    """(batch, padded length) pairs not used for export: every bucket, odd batches, and 'longest'."""
    shapes: list[tuple[int, int | None]] = [(max(1, min(3, spec.max_batch_tokens // spec.max_seq_length)), None),
                                             (1, None)]
    for b in spec.buckets:
        shapes.append((max(1, min(5, spec.max_batch_tokens // b)), b))  # long buckets: few rows (memory)
    return shapes


def validate(spec: BuildSpec, onnx_path: Path, tok, head, out_name: str, texts: list[str], log=print) -> dict:
    """ONNX Runtime vs PyTorch on real text; raises ParityError with a verdict per output."""
    import onnxruntime as ort
    import torch

    so = ort.SessionOptions()
    if spec.max_seq_length >= LONG_INPUT:  # long inputs: do not keep each shape's peak memory cached
        so.enable_cpu_mem_arena = False
        so.enable_mem_pattern = False
    sess = ort.InferenceSession(str(onnx_path), sess_options=so, providers=["CPUExecutionProvider"])
    verdicts = []
    all_cos: list[np.ndarray] = []
    max_abs = 0.0
    rng = np.random.default_rng(0)
    for batch, length in _shapes(spec):
        pick = [texts[j] for j in rng.choice(len(texts), size=min(batch, len(texts)), replace=False)]
        enc = tok(pick, padding=True if length is None else "max_length", truncation=True,
                  max_length=length or spec.max_seq_length, return_tensors="np")
        feeds = {n: (enc[n] if n in enc else np.zeros_like(enc["input_ids"])).astype(np.int64) for n in spec.input_names}
        got = sess.run([out_name], feeds)[0]
        with torch.inference_mode():
            want = head(*[torch.from_numpy(feeds[n]) for n in spec.input_names]).numpy()
        if got.shape != want.shape:
            raise ParityError(f"ONNX output {out_name} has shape {got.shape}, PyTorch {want.shape}")
        if spec.fused:
            cos = cosine_rows(got, want)
        else:  # compare pooled vectors: padding positions of hidden states are meaningless
            m = torch.from_numpy(feeds["attention_mask"])
            cos = cosine_rows(torch_pool(torch.from_numpy(got), m, spec.pooling).numpy(),
                              torch_pool(torch.from_numpy(want), m, spec.pooling).numpy())
        all_cos.append(cos)
        diff = float(np.max(np.abs(got - want)))
        max_abs = max(max_abs, diff)
        verdicts.append({"batch": int(got.shape[0]), "seq": int(feeds["input_ids"].shape[1]),
                         "cos_min": float(cos.min()), "max_abs_diff": diff})
    stats = CosineStats.of(np.concatenate(all_cos))
    ok = stats.passes(spec.gate)
    result = {"output": out_name, "ok": ok, "cosine": stats.as_dict(), "max_abs_diff": max_abs, "shapes": verdicts}
    mark = "[ok]" if ok else "[x]"
    log(f"{mark} ONNX vs PyTorch, output {out_name}: cosine p50 {stats.p50:.6f} p01 {stats.p01:.6f} "
        f"min {stats.min:.6f}, max |diff| {max_abs:.2e} over {len(verdicts)} shapes")
    if not ok:
        raise ParityError(
            f"ONNX export of {spec.model_dir.name} differs from PyTorch: " + "; ".join(stats.failures(spec.gate)),
            "try another --opset, or report the model architecture",
        )
    return result
