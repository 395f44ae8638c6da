"""fp32 ONNX -> the reduced-precision ONNX a strongly typed TensorRT engine is built from.

TensorRT 11 has no precision builder flags: an engine computes in the types its ONNX graph
holds. So precision is decided here, in a file that ONNX Runtime can run on any CPU, and the
quality gate judges that exact file before a GPU is involved:

- fp16 / bf16: ModelOpt AutoCast (`modelopt.onnx.autocast.convert_to_mixed_precision`),
  inputs and outputs kept in their types, the fused pooling head (everything outside the
  Hugging Face module, i.e. node names not under `/model/`) kept in fp32, and every node
  whose values on real calibration text fall out of the low type's range (AutoCast's
  reference run) kept in fp32. `--fp32-layers` also keeps LayerNormalization, Softmax and
  the reductions in fp32.
- int8 / fp8: explicit Q/DQ with ModelOpt's ONNX quantization, calibrated per bucket on
  real text padded to that bucket's length (one graph per bucket).

ONNX Runtime on the CPU runs fp16 and int8 Q/DQ graphs as they are. It has no bf16 kernels
(`NOT_IMPLEMENTED ... Add(14)`), so a bf16 graph is gated through a simulation: the same
graph with every bf16 tensor held in fp32 and rounded to bf16 (Cast there and back) after
every node that produced it, which is bf16 storage with fp32 arithmetic. The manifest says
so; an unrun gate is never reported as passed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import kind_of

from ..common.files import sha256_file
from ..common.log import Log
from ..errors import DependencyError, SpecError

# Node-name patterns kept in fp32: the fused pooling + L2 head lives outside the exported
# Hugging Face module, whose nodes torch.onnx names "/model/...".
HEAD_NODES = (r"^/[^/]+$",)
# --fp32-layers: numerically sensitive op types kept in fp32.
FP32_LAYER_OPS = ("LayerNormalization", "Softmax", "ReduceMean", "ReduceSum", "ReduceL2", "Pow", "Sqrt")
# Calibration rows per bucket, as a token budget: AutoCast's reference run keeps every
# intermediate tensor of the graph (MiniLM, 64 rows x 256 tokens: killed at 24 GB).
AUTOCAST_TOKENS, QUANTIZE_TOKENS, MAX_ROWS = 2048, 8192, 64


def calibration_rows(bucket: int, tokens: int) -> int:
    return max(1, min(MAX_ROWS, tokens // bucket))


@dataclass
class PrecisionArtifact:
    """The precision ONNX per bucket, and the graph the gate runs for it (the same file unless
    the type cannot run on this CPU)."""

    precision: str
    by_bucket: dict[int, Path]
    gate_by_bucket: dict[int, Path]
    gate_run: str                     # exact | simulated
    notes: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    def manifest(self) -> dict:
        files = {}
        for b, p in self.by_bucket.items():
            g = self.gate_by_bucket[b]
            files[str(b)] = {"onnx_sha256": sha256_file(p), "gate_onnx_sha256": sha256_file(g)}
        return {"precision": self.precision, "gate_run": self.gate_run, "notes": self.notes,
                "files": files, **self.details}


def require_modelopt() -> None:
    """Import ModelOpt's ONNX tools. ModelOpt imports `tensorrt` when it can and then calls it;
    the type stubs of `tensorrt-stubs` import as an empty namespace package (no trt.Logger), so
    such a stub-only package is hidden while ModelOpt is imported (it then runs without TensorRT,
    as on any CPU machine)."""
    import sys

    try:
        import tensorrt as trt

        stub_only = not hasattr(trt, "Builder")
    except Exception:  # not installed, or no libnvinfer: ModelOpt handles that itself
        stub_only = False
    saved = sys.modules.get("tensorrt")
    if stub_only:
        sys.modules["tensorrt"] = None  # type: ignore[assignment]  # `import tensorrt` raises ImportError
    try:
        import modelopt.onnx.autocast  # noqa: F401
        import modelopt.onnx.quantization  # noqa: F401
    except ImportError as exc:
        raise DependencyError(f"reduced precision for TensorRT needs NVIDIA ModelOpt ({exc})",
                              "pip install 'embtrt[precision]' (make install does); it runs on the CPU") from None
    finally:
        if stub_only:
            sys.modules["tensorrt"] = saved  # type: ignore[assignment]


def calibration_feeds(texts: list[str], tokenizer_json: Path, max_seq_length: int, pad_id: int,
                      buckets: tuple[int, ...], input_names: tuple[str, ...],
                      tokens: int, pairs: bool = False, prompt: str = "") -> dict[int, dict[str, np.ndarray]]:
    """Per bucket: real inputs of that bucket's length range (as many as `tokens` allows, at most
    MAX_ROWS), padded to the bucket, each with the `prompt` a request without options gets. A
    reranker (`pairs`) is calibrated on what it serves: the corpus's query-passage pairs
    (reference.pairs.corpus_pairs, the gate's recipe), tokenized as CrossEncoder.predict does
    (one pair per row, its segment ids, longest_first truncation, the prompt before each query)."""
    from ..common.backend import backend_lib

    text_mod, _ = backend_lib()
    tok = text_mod.TextTokenizer(str(tokenizer_json), max_seq_length, pad_id, "truncate")
    if pairs:
        from embtrt_backend.pairs import DEFAULT, PairTokenizer

        from ..reference.pairs import corpus_pairs

        queries, docs = corpus_pairs(texts)
        flat = [(prompt + q, d) for q, ds in zip(queries, docs) for d in ds]
        enc = PairTokenizer(str(tokenizer_json), max_seq_length, pad_id).encode(
            [q for q, _ in flat], [d for _, d in flat], DEFAULT)
    else:
        enc = tok.encode([prompt + t for t in texts] if prompt else texts)
    if not len(enc.ids):
        raise SpecError("no calibration input: the calibration texts make " + ("no query-passage pairs" if pairs
                        else "no texts"), "give --calibration-file at least 32 real texts, one per line")
    out = {}
    lo = 0
    for b in buckets:
        rows = calibration_rows(b, tokens)
        idx = [i for i, k in enumerate(enc.lengths) if lo < k <= b][:rows]
        if len(idx) < min(8, rows):  # too few inputs of this length: take the longest ones that fit in it
            fit = [i for i, k in enumerate(enc.lengths) if k <= b]
            idx = sorted(fit, key=lambda i: -int(enc.lengths[i]))[:rows]
        if not idx:
            raise SpecError(f"no calibration input fits bucket {b}: the shortest has {int(min(enc.lengths))} tokens",
                            "give --calibration-file texts of every bucket's length, or use larger --buckets")
        out[b] = tok.pad(enc, np.asarray(idx), b, input_names)
        lo = b
    return out


def autocast(src: Path, dst: Path, low: str, calibration: dict[int, dict[str, np.ndarray]], workdir: Path,
             fp32_layers: bool, log: Log) -> dict:
    """fp32 ONNX -> mixed fp16/bf16 ONNX (ModelOpt AutoCast), head and out-of-range nodes in fp32."""
    import onnx
    from modelopt.onnx.autocast import convert_to_mixed_precision

    cal = workdir / "autocast_calibration"
    cal.mkdir(parents=True, exist_ok=True)
    for b, feeds in calibration.items():  # AutoCast's reference run reads a folder of .npz files
        np.savez(cal / f"bucket_{b}.npz", **feeds)
    t0 = time.time()
    model = convert_to_mixed_precision(onnx_path=str(src), low_precision_type=low, keep_io_types=True,
                                       nodes_to_exclude=list(HEAD_NODES),
                                       op_types_to_exclude=list(FP32_LAYER_OPS) if fp32_layers else None,
                                       calibration_data=str(cal))
    onnx.save(model, str(dst))
    elem = {"fp16": onnx.TensorProto.FLOAT16, "bf16": onnx.TensorProto.BFLOAT16}[low]
    g = model.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.value_info) + list(g.output) + list(g.input)}
    # a node is in the low type when the first of its outputs with a known type is
    low_nodes = sum(1 for n in g.node if n.op_type != "Cast" and next((types[o] for o in n.output if o in types), None) == elem)
    casts = sum(1 for n in model.graph.node if n.op_type == "Cast")
    log(f"AutoCast {low}: {low_nodes} nodes in {low}, {casts} casts, pooling head"
        f"{', LayerNorm/Softmax/reductions' if fp32_layers else ''} and out-of-range nodes kept in fp32 "
        f"({time.time() - t0:.1f} s)")
    return {"tool": "modelopt.onnx.autocast.convert_to_mixed_precision", "low_precision_type": low,
            "keep_io_types": True, "nodes_to_exclude": list(HEAD_NODES),
            "op_types_to_exclude": list(FP32_LAYER_OPS) if fp32_layers else [],
            "calibration": {str(b): list(next(iter(f.values())).shape) for b, f in calibration.items()},
            "nodes_low_precision": low_nodes, "casts": casts}


def quantize(src: Path, dst: Path, mode: str, feeds: dict[str, np.ndarray], log: Log) -> dict:
    """fp32 ONNX -> explicit Q/DQ ONNX (ModelOpt), calibrated on one bucket's real text."""
    from modelopt.onnx.quantization import quantize as mo_quantize

    t0 = time.time()
    # high_precision_dtype fp32: its fp16 default overflows the graph's large mask constants
    # ("overflow encountered in cast"; cosine p50 0.47 on MiniLM). calibration_method max: its int8 default
    # (entropy) fails inside ONNX Runtime 1.32's calibrator ("Unexpected dtype float64 for k='lowest'").
    mo_quantize(onnx_path=str(src), quantize_mode=mode, calibration_data=feeds, calibration_eps=["cpu"], calibration_method="max",
                high_precision_dtype="fp32", mha_accumulation_dtype="fp32", output_path=str(dst),
                nodes_to_exclude=list(HEAD_NODES), log_level="ERROR")
    import onnx

    model = onnx.load(str(dst), load_external_data=False)
    pairs = sum(1 for n in model.graph.node if n.op_type == "QuantizeLinear")
    log(f"ModelOpt {mode} Q/DQ for shape {list(next(iter(feeds.values())).shape)}: {pairs} quantized tensors "
        f"({time.time() - t0:.1f} s)")
    return {"qdq_pairs": pairs}


def simulate_bf16(src: Path, dst: Path) -> Path:
    """A bf16 graph ONNX Runtime CPU can run: bf16 tensors held in fp32, rounded to bf16 after
    every node that produced one (Cast to bf16 and back; ORT's Cast rounds to nearest even)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    m = onnx.load(str(src))
    g = m.graph
    BF, F = TensorProto.BFLOAT16, TensorProto.FLOAT

    def to_f32(t):
        if t.data_type != BF:
            return t
        arr = numpy_helper.to_array(t).astype(np.float32)  # bf16 values are exact in fp32
        return numpy_helper.from_array(arr, t.name)

    for i, t in enumerate(list(g.initializer)):
        g.initializer[i].CopyFrom(to_f32(t))
    bf_names = set()
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        if vi.type.tensor_type.elem_type == BF:
            vi.type.tensor_type.elem_type = F
            bf_names.add(vi.name)
    nodes = []
    for n in g.node:
        if n.op_type == "Cast" and n.input[0] in bf_names and any(a.name == "to" and a.i == F for a in n.attribute):
            # bf16 -> fp32 became fp32 -> fp32: an Identity (ONNX Runtime's optimizer mis-wires such casts)
            n.op_type = "Identity"
            del n.attribute[:]
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                a.t.CopyFrom(to_f32(a.t))
            if n.op_type in ("Cast", "CastLike", "ConstantOfShape") and a.name == "to" and a.i == BF:
                a.i = F
                bf_names.update(n.output)
        nodes.append(n)
        for o in n.output:  # round every bf16-typed output: store in bf16, compute in fp32
            if o in bf_names:
                r = f"{o}__bf16sim"
                n.output[list(n.output).index(o)] = r
                nodes.append(helper.make_node("Cast", [r], [f"{r}_b"], to=BF, name=f"{r}_to_bf16"))
                nodes.append(helper.make_node("Cast", [f"{r}_b"], [o], to=F, name=f"{r}_to_fp32"))
    del g.node[:]
    g.node.extend(_topological(nodes, {i.name for i in g.input} | {t.name for t in g.initializer}))
    onnx.save(m, str(dst))
    return dst


def _topological(nodes: list, known: set[str]) -> list:
    """Nodes in an order where every input is produced before it is used (AutoCast's output
    is not always in that order, which ONNX Runtime requires once casts are inserted)."""
    produced = set(known) | {""}
    pending, ordered = list(nodes), []
    while pending:
        ready = [n for n in pending if all(i in produced for i in n.input)]
        if not ready:  # inputs from outside (e.g. outer scopes): keep the rest as they were
            ordered.extend(pending)
            break
        ids = {id(n) for n in ready}
        pending = [n for n in pending if id(n) not in ids]
        for n in ready:
            produced.update(n.output)
        ordered.extend(ready)
    return ordered


def make_precision_onnx(spec, fp32_onnx: Path, work: Path, texts: list[str], tokenizer_json: Path, pad_id: int,
                        log: Log) -> PrecisionArtifact:
    """The precision ONNX per bucket for a TensorRT build (fp32: the exported graph itself)."""
    p = spec.precision
    if p == "fp32":
        return PrecisionArtifact(p, {b: fp32_onnx for b in spec.buckets}, {b: fp32_onnx for b in spec.buckets}, "exact")
    require_modelopt()
    work.mkdir(parents=True, exist_ok=True)
    cal_texts = texts
    if spec.calibration_file is not None:
        from ..common.corpus import load_corpus

        cal_texts = load_corpus(spec.calibration_file)
    tokens = AUTOCAST_TOKENS if p in ("fp16", "bf16") else QUANTIZE_TOKENS
    pairs = kind_of(spec.kind).pairs
    cal = calibration_feeds(cal_texts, tokenizer_json, spec.max_seq_length, pad_id, spec.buckets, spec.input_names, tokens,
                            pairs=pairs,
                            prompt="" if kind_of(spec.kind).input.prompts_per_side else spec.default_prompt)  # sparse: per route
    src = "--calibration-file " + str(spec.calibration_file) if spec.calibration_file else "the bundled corpus"
    if pairs:
        src += " (query-passage pairs, tokenized as CrossEncoder.predict)"
    if p in ("fp16", "bf16"):
        dst = work / f"model.{p}.onnx"
        details = autocast(fp32_onnx, dst, p, cal, work, spec.fp32_layers, log)
        details["calibration_source"] = src
        if p == "fp16":
            return PrecisionArtifact(p, {b: dst for b in spec.buckets}, {b: dst for b in spec.buckets}, "exact",
                                     details=details)
        sim = simulate_bf16(dst, work / "model.bf16sim.onnx")
        note = ("bf16 cannot run in ONNX Runtime on the CPU: the gate ran a simulation of this exact graph "
                "(bf16 storage of every bf16 tensor, fp32 arithmetic), not the graph itself; "
                "`embtrt engines` on the GPU compares each plan with that simulation")
        log(note)
        return PrecisionArtifact(p, {b: dst for b in spec.buckets}, {b: sim for b in spec.buckets}, "simulated",
                                 notes=[note], details=details)
    by_bucket, details = {}, {"tool": "modelopt.onnx.quantization.quantize", "quantize_mode": p,
                              "high_precision_dtype": "fp32", "calibration_source": src, "buckets": {}}
    for b in spec.buckets:
        dst = work / f"model.{p}.{b}.onnx"
        details["buckets"][str(b)] = quantize(fp32_onnx, dst, p, cal[b], log)
        by_bucket[b] = dst
    return PrecisionArtifact(p, by_bucket, dict(by_bucket), "exact", details=details)

