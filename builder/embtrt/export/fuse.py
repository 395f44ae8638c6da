"""ONNX Runtime's fused attention for long encoders (#67 / #71's long inputs on CPU).

The exported graph (eager attention) writes every L x L attention map out; ONNX Runtime runs each of its
nodes on its own and, without its memory arena (long builds: `ort_arena` false), allocates and faults in every
map again per layer. Its own transformer optimizer (onnxruntime.transformers.optimizer, model_type bert) fuses
an encoder's attention into its `Attention` contrib op (and the embeddings' and layer norms' nodes into theirs):
measured on a tiny BERT at 16,384 tokens (benchmarks/long_attention.py, results/long-attention-16k-20261207),
6.8 s and 5.4 GiB per text become 2.3 s and 2.1 GiB; at 16-512 tokens MiniLM's shape runs within 0.87-1.11x, so
the build fuses long models only (max_seq_length >= LONG_INPUT). The fused graph is what the gate judges and
what is served: it never changes a vector unseen. Contrib ops are ONNX Runtime's own: python-ort and the
onnxruntime target on CPU only (OpenVINO and TensorRT cannot read them)."""

from __future__ import annotations

from pathlib import Path

from ..common.files import json_object
from ..common.log import Log
from .spec import LONG_INPUT, BuildSpec

# the Hugging Face model types whose exported attention the optimizer's BERT fusion reads
FUSABLE = ("bert", "roberta", "xlm-roberta", "camembert", "electra")


def fuses(spec: BuildSpec, cfg: dict) -> str:
    """Why this build does not fuse its attention ("" where it does); `cfg`: the folder's config.json."""
    if not spec.fuse_attention:
        return "--no-fuse-attention"
    if spec.precision != "fp32":
        return f"precision {spec.precision} (the fusion is applied to fp32 graphs)"
    if spec.target != "python-ort" and not (spec.target == "onnxruntime" and spec.device == "cpu"):
        return f"target {spec.target}" + (f" on {spec.device}" if spec.target == "onnxruntime" else "")
    if spec.max_seq_length < LONG_INPUT:
        return f"max length {spec.max_seq_length} < {LONG_INPUT} (short inputs run as fast unfused)"
    model_type = cfg.get("model_type")
    if model_type not in FUSABLE:
        return f"model type {model_type!r} (fused for {', '.join(FUSABLE)})"
    return ""


def fuse_attention(spec: BuildSpec, src: Path, dst: Path, log: Log) -> tuple[Path, dict | None]:
    """The graph an ONNX Runtime target serves for `src`: its fused form where this build fuses and the optimizer
    found every layer's attention (else `src`, said why) -> (path, the manifest's precision_onnx record or None)."""
    cfg = json_object(Path(spec.model_dir) / "config.json")
    why = fuses(spec, cfg)
    if why:
        if spec.fuse_attention and spec.max_seq_length >= LONG_INPUT:
            log(f"attention not fused: {why}")
        return src, None
    import onnx
    from onnxruntime.transformers.optimizer import optimize_model

    heads, hidden, layers = (int(cfg.get(k) or 0) for k in ("num_attention_heads", "hidden_size", "num_hidden_layers"))
    fused = optimize_model(str(src), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0)
    nodes = [n.op_type for n in fused.model.graph.node]
    attention = nodes.count("Attention")
    before = [i.name for i in onnx.load(str(src), load_external_data=False).graph.input]
    after = [i.name for i in fused.model.graph.input]
    if attention != layers or after != before:
        log(f"attention not fused: the optimizer fused {attention} of {layers} layers"
            + ("" if after == before else f" and changed the inputs ({before} -> {after})") + "; serving the export")
        return src, None
    large = src.stat().st_size > 1_500_000_000   # protobuf's 2 GB: weights beside the graph
    fused.save_model_to_file(str(dst), use_external_data_format=large)
    log(f"attention fused for ONNX Runtime: {attention} Attention nodes (onnxruntime.transformers.optimizer, "
        "model_type bert); the gate judges the fused graph")
    return dst, {"precision": "fp32", "gate_run": "exact", "tool": "onnxruntime.transformers.optimizer (model_type bert)",
                 "fused": {"Attention": attention, "EmbedLayerNormalization": nodes.count("EmbedLayerNormalization"),
                           "SkipLayerNormalization": nodes.count("SkipLayerNormalization")}}
