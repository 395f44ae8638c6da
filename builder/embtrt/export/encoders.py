"""Per-target encoder steps that are not TensorRT: OpenVINO availability, ORT int8, and the
identity (backend profile) each target records."""

from __future__ import annotations

import platform
import shlex
from pathlib import Path

from .. import __version__
from ..common.log import Log
from ..errors import DependencyError, ParityError
from .spec import BuildSpec


def require_openvino(precision: str, log: Log) -> None:
    """The python-openvino target needs the openvino package here (the parity gate runs it)
    and in the serving environment; bf16 needs a CPU that OpenVINO can run bf16 on."""
    try:
        import openvino as ov
    except ImportError as exc:
        raise DependencyError(f"--target python-openvino needs the openvino package ({exc})",
                              "pip install 'embtrt[openvino]' (or make install)") from None
    caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if precision == "bf16" and "BF16" not in caps:
        raise DependencyError("--precision bf16: OpenVINO reports no bf16 support on this CPU "
                              f"(capabilities: {', '.join(caps)})",
                              "bf16 needs AVX-512 bf16 or AMX (Xeon Sapphire Rapids or newer); use --precision fp32")
    log(f"OpenVINO {ov.__version__.split('-')[0]}, CPU capabilities: {', '.join(caps)}")


def quantize_int8(src: Path, dst: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return dst


def ort_graph(spec: BuildSpec, onnx_path: Path, work: Path, texts: list[str], tok_json: Path, pad_id: int,
              log: Log) -> tuple[Path, dict | None]:
    """The graph an ONNX Runtime target (python-ort, onnxruntime) serves at its precision, which the
    gate then judges, and the manifest's `precision_onnx` record of how it was made (None: the
    export itself): the export at fp32; int8: its ONNX Runtime dynamic quantization; fp16
    (onnxruntime): ModelOpt AutoCast's mixed fp16 graph, as for TensorRT (fp16 I/O kept fp32)."""
    if spec.precision == "int8":
        log("quantizing the graph to int8 (ONNX Runtime dynamic quantization; the gate judges it)")
        dst = quantize_int8(onnx_path, onnx_path.with_name("model.int8.onnx"))
        return dst, {"precision": "int8", "gate_run": "exact", "tool": "onnxruntime.quantization.quantize_dynamic",
                     "weight_type": "QInt8", "calibration_source": "none (dynamic: activation ranges per run)"}
    if spec.precision == "fp16":
        from .precision import make_precision_onnx

        art = make_precision_onnx(spec, onnx_path, work / "precision", texts, tok_json, pad_id, log)
        log("the fp16 graph (ModelOpt AutoCast) is what ONNX Runtime serves; the gate judges it")
        return art.gate_by_bucket[spec.buckets[0]], art.manifest()
    from .fuse import fuse_attention   # long models: ONNX Runtime's fused attention (fuse.py)

    return fuse_attention(spec, onnx_path, onnx_path.with_name("model.fused.onnx"), log)


def versions() -> dict[str, str]:
    out = {"embtrt": __version__, "python": platform.python_version()}
    for mod in ("torch", "transformers", "onnx", "onnxruntime", "openvino", "tokenizers", "tritonclient", "numpy"):
        try:
            out[mod] = str(__import__(mod).__version__)
        except AttributeError:  # e.g. tritonclient has no __version__: ask the installed distribution
            from importlib.metadata import PackageNotFoundError, version

            try:
                out[mod] = version(mod)
            except PackageNotFoundError:
                out[mod] = "unknown"
        except Exception:  # a missing optional library is recorded as absent
            out[mod] = "absent"
    return out


def identity(spec: BuildSpec, model_sha: str) -> dict[str, str]:
    import onnxruntime

    if spec.target == "tensorrt":
        profile = f"tensorrt:gpu:{spec.precision}"
    elif spec.target == "onnxruntime":
        profile = f"onnxruntime-backend:{'gpu' if spec.device == 'cuda' else 'cpu'}:{spec.precision}"
    elif spec.target == "python-torch":
        import torch

        profile = f"python-torch:{spec.device}:{spec.precision}:torch-{torch.__version__}"
    elif spec.target == "python-openvino":
        import openvino

        profile = f"python-openvino:cpu:{spec.precision}:openvino-{openvino.__version__.split('-')[0]}"
    else:
        profile = f"python-ort:cpu:{spec.precision}:onnxruntime-{onnxruntime.__version__}"
    return {
        "embtrt.model": spec.model_dir.name if spec.model_dir.name != "model" else spec.name,
        "embtrt.model_sha256": model_sha,
        "embtrt.pooling": spec.pooling,
        "embtrt.normalize": str(spec.normalize).lower(),
        "embtrt.dim": str(spec.hidden_size),
        "embtrt.max_seq_length": str(spec.max_seq_length),
        "embtrt.buckets": ",".join(map(str, spec.buckets)),
        "embtrt.precision": spec.precision,
        "embtrt.target": spec.target,
        "embtrt.backend_profile": profile,
        "embtrt.version": __version__,
    }


def rebuild_command(spec: BuildSpec) -> str:
    parts = ["embtrt", "build", str(spec.model_dir), "--out", str(spec.out), "--name", spec.name,
             "--target", spec.target, "--pooling", spec.pooling,
             "--normalize" if spec.normalize else "--no-normalize",
             "--buckets", ",".join(map(str, spec.buckets)), "--max-seq-length", str(spec.max_seq_length),
             "--max-batch-size", str(spec.max_batch_size), "--max-queue-delay-us", str(spec.max_queue_delay_us),
             "--preferred-batch-sizes", ",".join(map(str, spec.preferred_batch_sizes)),
             "--instances", str(spec.instances), "--front-door-instances", str(spec.front_instances),
             "--encoder-instances", str(spec.encoder_count),
             "--precision", spec.precision, "--pooler", spec.pooler,
             "--overflow", spec.overflow, "--overflow-stride", str(spec.overflow_stride),
             "--max-queue-size", str(spec.max_queue_size),
             "--queue-timeout-us", str(spec.queue_timeout_us), "--ort-threads", str(spec.ort_threads),
             "--router-encoder", spec.router_mode, "--run-overhead-tokens", str(spec.run_overhead_tokens)]
    parts += ["--max-batch-tokens", str(spec.max_batch_tokens), "--server-python", spec.server_python]
    if spec.target in ("onnxruntime", "python-torch"):
        parts += ["--device", spec.device]
    if spec.target == "python-torch" and spec.device == "cuda" and not spec.cuda_graphs:
        parts.append("--no-cuda-graphs")
    for name, text in spec.prompts:
        parts += ["--prompt", shlex.quote(f"{name}={text}")]
    parts += ["--default-prompt", spec.default_prompt_name or "none"]
    if spec.pair_template:   # an LLM-style reranker's prompt template (embtrt_backend.pair_template)
        from embtrt_backend.pair_template import build_options

        parts += [shlex.quote(x) for x in build_options(spec.pair_template)]
    if spec.dimensions is not None:
        parts += ["--dimensions", ",".join(map(str, spec.dimensions))]
    if not spec.bundle_deps:
        parts.append("--no-bundle-deps")
    if not spec.fuse_attention:
        parts.append("--no-fuse-attention")
    if spec.active_dims_in_graph:
        parts.append("--active-dims-in-graph")
    if spec.stage_timers:
        parts.append("--stage-timers")
    if spec.trust_remote_code:   # the folder runs its own code: the build was told to trust it
        parts.append("--trust-remote-code")
    if spec.target == "tensorrt":
        parts += ["--builder-opt-level", str(spec.builder_opt_level)]
    if spec.target == "tensorrt" or spec.precision == "fp16":   # AutoCast (onnxruntime fp16 too) reads both
        parts += ["--fp32-layers"] if spec.fp32_layers else []
        if spec.calibration_file is not None:
            parts += ["--calibration-file", str(spec.calibration_file)]
    if spec.target == "onnxruntime" and spec.ort_trt_fp16:
        parts.append("--ort-trt-fp16")
    return " ".join(parts)


def refuse_on_gate(spec: BuildSpec, passed: bool, failures: list[str], what: str, hint: str, log: Log) -> None:
    """After the gate: a failed gate refuses the build (ParityError naming the failures and what to do),
    unless --allow-mismatch keeps it (said in the log)."""
    if passed:
        return
    if not spec.allow_mismatch:
        raise ParityError(f"{spec.target}/{spec.precision} {what}: " + "; ".join(failures),
                          hint + " (or pass --allow-mismatch to keep it)")
    log("[x] gate failed; kept because --allow-mismatch was given")
