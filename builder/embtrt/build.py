"""`embtrt build`: spec -> ONNX -> per-bucket encoders -> parity gate -> render -> check -> manifest.

The repository is written to a temporary folder next to the destination and moved into
place only after every check passed: a failed build leaves nothing half-written.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from . import __version__
from .check import check_repository
from .errors import DependencyError, EmbtrtError, ParityError, RepositoryError, SpecError
from .hf2onnx import export
from .modelinfo import model_hash, sha256_file
from .parity import GateReport, bucket_label, evaluate
from .reference import TorchReference
from .render import attach_deps, bundle_dir, model_names, plan_repository, write_repository
from .resources import data_file, python_backend_dir
from .spec import BuildSpec

Log = Callable[[str], None]


@dataclass
class BuildResult:
    repository: Path
    manifest: dict
    check_lines: list[str]
    parity_lines: list[str]
    pending: list[str]


def backend_lib():
    """Import the serving-side logic (python_backend/embtrt_backend) the builder checks with."""
    p = str(python_backend_dir())
    if p not in sys.path:
        sys.path.insert(0, p)
    import embtrt_backend.encoder as encoder
    import embtrt_backend.text as text

    return text, encoder


def load_corpus(path: Path | None = None) -> list[str]:
    """A JSON list of strings, or one text per line. Default: the bundled real-text sample."""
    path = Path(path) if path else data_file("corpus.txt")
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"invalid corpus: cannot read {path}: {exc}", "pass a readable text or JSON file") from exc
    if raw.lstrip().startswith("["):
        try:
            texts = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SpecError(f"invalid corpus: {path} is not valid JSON: {exc}", "a JSON list of strings") from exc
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise SpecError(f"invalid corpus: {path} must be a JSON list of strings")
    else:
        texts = [line for line in raw.splitlines() if line.strip()]
    if len(texts) < 2:
        raise SpecError(f"invalid corpus: {path} holds {len(texts)} texts", "at least 2 texts are needed")
    return texts


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


def save_tokenizer(spec: BuildSpec, dest: Path) -> int:
    """Write the fast tokenizer's tokenizer.json; return the pad id the serving side uses."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(spec.model_dir), trust_remote_code=spec.trust_remote_code)
    tok.backend_tokenizer.save(str(dest))
    pad = tok.pad_token_id
    if pad is None:
        pad = tok.eos_token_id if tok.eos_token_id is not None else 0
    return int(pad)


def check_tokenizer(spec: BuildSpec, tokenizer_json: Path, pad_id: int, texts: list[str], log: Log) -> None:
    """Serving tokenizer (tokenizers + our truncation) must give the reference's ids."""
    from transformers import AutoTokenizer

    text_mod, _ = backend_lib()
    ours = text_mod.TextTokenizer(str(tokenizer_json), spec.max_seq_length, pad_id, "truncate")
    ref = AutoTokenizer.from_pretrained(str(spec.model_dir), trust_remote_code=spec.trust_remote_code)
    enc = ours.encode(texts)
    want = ref(texts, truncation=True, max_length=spec.max_seq_length)["input_ids"]
    bad = [i for i, (a, b) in enumerate(zip(enc.ids, want)) if list(a) != list(b)]
    if bad:
        raise ParityError(f"the serving tokenizer differs from the reference on {len(bad)} of {len(texts)} texts "
                          f"(first: {texts[bad[0]][:60]!r})", "the tokenizer.json lacks settings of the HF tokenizer")
    log(f"[ok] serving tokenizer equals the reference tokenizer on {len(texts)} texts")


def encoder_vectors(spec: BuildSpec, onnx_by_bucket: dict[int, Path | None], tokenizer_json: Path, pad_id: int,
                    output_name: str, texts: list[str],
                    sessions: dict[object, object] | None = None,
                    extra_params: dict[str, str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Embed texts exactly as the per-bucket ensembles do: pad to the bucket, run its encoder
    through the same factory the Python-backend models use. The encoders it creates are left in
    `sessions` (keyed by their ONNX file) for the caller to reuse."""
    text_mod, enc_mod = backend_lib()
    from embtrt_backend.pooling import pool_and_normalize
    from embtrt_backend.routing import plan

    tok = text_mod.TextTokenizer(str(tokenizer_json), spec.max_seq_length, pad_id, "truncate")
    enc = tok.encode(texts)
    untruncated = text_mod.TextTokenizer(str(tokenizer_json), 1 << 20, pad_id, "truncate").encode(texts).lengths
    labels = [bucket_label(int(n), spec.buckets, spec.max_seq_length) for n in untruncated]
    out = np.zeros((len(texts), spec.hidden_size), dtype=np.float32)
    from .render import runtime_params

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
            res = pool_and_normalize(res, feeds["attention_mask"], spec.pooling, spec.normalize)
        out[rows] = res
    return out, labels


def overhead_from_timings(samples: list[tuple[int, int, float]]) -> tuple[float, float, int]:
    """Fit seconds = fixed + per_token * rows * length over (rows, length, seconds) samples;
    return (fixed s, per-token s, fixed cost in tokens) — the run overhead the front door's
    chunking weighs against padding. Clipped to 0 .. 4096 tokens."""
    x = np.array([[1.0, r * n] for r, n, _ in samples])
    y = np.array([t for *_, t in samples])
    (fixed, per_token), *_ = np.linalg.lstsq(x, y, rcond=None)
    if per_token <= 0:
        return float(fixed), float(per_token), 4096
    return float(fixed), float(per_token), int(np.clip(round(fixed / per_token), 0, 4096))


def measure_run_overhead(encoder, input_names: tuple[str, ...], ids: list[int], reps: int = 5,
                         shapes: tuple[tuple[int, int], ...] = ((1, 16), (16, 16), (1, 32), (8, 32), (16, 32))
                         ) -> tuple[float, float, int]:
    """Time the built encoder on a few (rows, length) shapes of real token ids (median of
    `reps` runs each) and fit the fixed cost of one run against the cost of one token."""
    samples = []
    for rows, length in shapes:
        seq = (ids * (length // max(1, len(ids)) + 1))[:length]
        feeds = {"input_ids": np.tile(np.asarray(seq, dtype=np.int64), (rows, 1)),
                 "attention_mask": np.ones((rows, length), dtype=np.int64)}
        if "token_type_ids" in input_names:
            feeds["token_type_ids"] = np.zeros((rows, length), dtype=np.int64)
        encoder.run(feeds)  # warm this shape
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            encoder.run(feeds)
            times.append(time.perf_counter() - t0)
        samples.append((rows, length, float(np.median(times))))
    return overhead_from_timings(samples)


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


def _calibrate_chunking(spec: BuildSpec, encoder: object, tok_json: Path, pad_id: int, texts: list[str],
                        log: Log) -> int:
    """Measure the run overhead on the encoder the parity gate just ran (the one that is served)."""
    text_mod, _ = backend_lib()
    ids = text_mod.TextTokenizer(str(tok_json), spec.max_seq_length, pad_id).encode(texts[:1]).ids[0]
    fixed, per_token, tokens = measure_run_overhead(encoder, spec.input_names, ids)
    log(f"encoder run cost measured here: {fixed * 1e3:.2f} ms per run + {per_token * 1e6:.1f} us per token "
        f"-> run overhead {tokens} tokens (front-door chunking; --run-overhead-tokens overrides)")
    return tokens


def quantize_int8(src: Path, dst: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return dst


def identity(spec: BuildSpec, model_sha: str) -> dict[str, str]:
    import onnxruntime

    if spec.target == "tensorrt":
        profile = f"tensorrt:gpu:{spec.precision}"
    elif spec.target == "onnxruntime":
        profile = f"onnxruntime-backend:{spec.ort_device}:{spec.precision}"
    elif spec.target == "python-torch":
        import torch

        profile = f"python-torch:cpu:{spec.precision}:torch-{torch.__version__}"
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
             "--router-encoder", spec.router_mode]
    if spec.run_overhead_tokens is not None:
        parts += ["--run-overhead-tokens", str(spec.run_overhead_tokens)]
    parts += ["--max-batch-tokens", str(spec.max_batch_tokens), "--server-python", spec.server_python]
    if not spec.bundle_deps:
        parts.append("--no-bundle-deps")
    if spec.target == "tensorrt":
        parts += ["--builder-opt-level", str(spec.builder_opt_level)] + (["--fp32-layers"] if spec.fp32_layers else [])
        if spec.calibration_file is not None:
            parts += ["--calibration-file", str(spec.calibration_file)]
    if spec.target == "onnxruntime":
        parts += ["--ort-device", spec.ort_device] + (["--ort-trt-fp16"] if spec.ort_trt_fp16 else [])
    return " ".join(parts)


def _tensorrt_engines(spec: BuildSpec, prec, repo: Path, texts: list[str], log: Log) -> tuple[list[str], dict]:
    """Write the per-bucket recipes; build the plans now where TensorRT and a GPU exist."""
    from .onnx2trt import build_engines, tensorrt_available, write_recipes

    write_recipes(spec, prec, repo, log=log)
    ok, why = tensorrt_available()
    if not ok:
        log(f"TensorRT plans not built here: {why}.")
        log(f"Finish on the GPU host: embtrt engines {spec.out}")
        return ([f"{spec.name}_{b}_encoder/1/model.plan" for b in spec.buckets],
                {"built": False, "reason": why, "finish_with": f"embtrt engines {spec.out}"})
    states = build_engines(repo, allow_mismatch=spec.allow_mismatch, texts=texts, gate=spec.gate, log=log)
    return [], {"built": True, "plans": {s.model: s.state for s in states}}


def build(spec: BuildSpec, *, force: bool = False, corpus: Path | None = None, log: Log = print) -> BuildResult:
    t0 = time.time()
    out = spec.out.resolve()
    if out.exists() and any(out.iterdir()) and not force:
        raise SpecError(f"invalid out: {out} exists and is not empty", "pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    texts = load_corpus(corpus)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.embtrt-", dir=out.parent))
    try:
        result = _build_in(spec, tmp, texts, log)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{int(time.time())}")
            out.rename(old)
            (tmp / "repo").rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            (tmp / "repo").rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.repository = out
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    result.manifest["build_peak_rss_mib"] = round(peak)
    log(f"repository written to {out} in {time.time() - t0:.1f} s (peak memory of the build process: {peak:.0f} MiB)")
    return result


def _build_in(spec: BuildSpec, tmp: Path, texts: list[str], log: Log) -> BuildResult:
    work, repo = tmp / "work", tmp / "repo"
    repo.mkdir(parents=True)
    work.mkdir(parents=True)
    steps = 7
    log(f"[1/{steps}] reading {spec.model_dir} (target {spec.target}, pooling {spec.pooling}, "
        f"normalize {spec.normalize}, buckets {','.join(map(str, spec.buckets))})")
    msha = model_hash(spec.model_dir)
    if spec.target == "python-openvino":
        require_openvino(spec.precision, log)

    art = None
    output_name = "embedding" if spec.fused else "last_hidden_state"
    if spec.target == "python-torch":
        log(f"[2/{steps}] no ONNX export: the python-torch encoder runs the PyTorch model itself")
    else:
        log(f"[2/{steps}] exporting to ONNX and validating against PyTorch")
        art = export(spec, work / "onnx", texts, log=log)
        if art.input_names != tuple(spec.input_names):  # the graph's own inputs decide what is fed and served
            spec = spec.with_(input_names=art.input_names)

    log(f"[3/{steps}] tokenizer")
    tok_json = work / "tokenizer.json"
    pad_id = save_tokenizer(spec, tok_json)
    check_tokenizer(spec, tok_json, pad_id, texts, log)

    log(f"[4/{steps}] per-bucket encoders ({spec.target}, {spec.precision})")
    encoder_onnx = art.path if art is not None else None
    if spec.precision == "int8" and art is not None and spec.target in ("python-ort", "onnxruntime"):
        encoder_onnx = quantize_int8(art.path, work / "onnx" / "model.int8.onnx")
        log("quantized the encoder to int8 (ONNX Runtime dynamic quantization)")
    if spec.target == "python-torch":
        log(f"PyTorch {spec.precision}" + (" autocast (AMX/AVX-512 bf16 where the CPU has it)" if spec.precision == "bf16" else ""))
    onnx_by_bucket: dict[int, Path | None] = {b: encoder_onnx for b in spec.buckets}
    prec = None
    if spec.target == "tensorrt" and art is not None:
        from .precision import make_precision_onnx

        prec = make_precision_onnx(spec, art.path, work / "precision", texts, tok_json, pad_id, log)
        onnx_by_bucket = dict(prec.gate_by_bucket)  # the gate judges the exact graph each plan is built from
    pending: list[str] = []

    log(f"[5/{steps}] parity gate: served path vs PyTorch reference on {len(texts)} real texts")
    ref = TorchReference(spec.model_dir, spec.pooling, spec.normalize, spec.max_seq_length,
                         spec.input_names, spec.trust_remote_code).embed(texts, max_batch_tokens=spec.max_batch_tokens)
    sessions: dict[object, object] = {}
    try:
        exact = {"ort_optimize": "false"} if prec is not None and prec.gate_run == "simulated" else None
        cand, labels = encoder_vectors(spec, onnx_by_bucket, tok_json, pad_id, output_name, texts, sessions, exact)
    except Exception as exc:  # e.g. ONNX Runtime has no CPU kernel for a type of the precision graph
        if prec is None or type(exc).__module__.split(".")[0] != "onnxruntime":
            raise
        raise ParityError(f"the {spec.precision} ONNX cannot run in ONNX Runtime on this CPU, so the quality gate "
                          f"cannot judge it ({type(exc).__name__}: {str(exc)[:200]})",
                          "reduced precision ships only behind the gate: use fp16 or int8 for TensorRT") from None
    report: GateReport = evaluate(ref, cand, labels, spec.gate, texts)
    for line in report.lines():
        log(line)
    if prec is not None and prec.gate_run != "exact":
        log(f"[note] the gate ran a {prec.gate_run} {spec.precision} graph: " + "; ".join(prec.notes))
    if not report.passed:
        if spec.target == "tensorrt":
            hint = {"fp16": "rebuild with --fp32-layers (LayerNorm, Softmax, reductions in fp32) or use --precision fp32",
                    "bf16": "rebuild with --fp32-layers, or use fp16 (more mantissa) or fp32",
                    "int8": "int8 Q/DQ changes the vectors beyond the gate for this model; use --precision fp16",
                    "fp8": "fp8 Q/DQ changes the vectors beyond the gate for this model; use --precision fp16"}.get(
                        spec.precision, "check --pooling and --normalize against the model card")
        else:
            hint = {"int8": "int8 dynamic quantization changes MiniLM-class vectors far beyond the gate; use --precision "
                            "fp32, or bf16 with --target python-openvino (or python-torch) on a CPU with AMX/AVX-512 bf16",
                    "bf16": "bf16 loses too much for this model; use --precision fp32"}.get(
                        spec.precision, "check --pooling and --normalize against the model card")
        if not spec.allow_mismatch:
            raise ParityError(f"{spec.target}/{spec.precision} encoders fail the quality gate: "
                              + "; ".join(report.failures()), hint + " (or pass --allow-mismatch to keep it)")
        log("[x] gate failed; kept because --allow-mismatch was given")

    if spec.run_overhead_tokens is None and spec.target != "tensorrt":
        served = sessions[encoder_onnx]  # every bucket of a non-TensorRT build runs this one encoder
        spec = spec.with_(run_overhead_tokens=_calibrate_chunking(spec, served, tok_json, pad_id, texts, log))

    log(f"[6/{steps}] rendering {spec.name} and its per-bucket models")
    ident = identity(spec, msha)
    plans = plan_repository(spec, onnx_paths=onnx_by_bucket, encoder_output=output_name,
                            tokenizer_json=tok_json, pad_id=pad_id, identity=ident)
    attach_deps(spec, plans)
    write_repository(plans, repo)
    bundle = None
    if spec.bundle_deps:
        from .bundle import make_bundle

        bundle = make_bundle(spec.target, spec.server_python, repo / bundle_dir(spec), log)
        bundle["path"] = bundle_dir(spec)
    else:
        log("no Python packages bundled (--no-bundle-deps): the server's Python must have "
            + ", ".join(sorted({m for p in plans if p.deps for m in p.deps["requires"]})))
    names = model_names(spec)
    manifest = {
        "embtrt_manifest": 1,
        "identity": ident,
        "source": {"path": str(spec.model_dir), "sha256": msha},
        "name": spec.name,
        "models": {"front_door": spec.name, "ensembles": list(names["ensemble"].values()),
                   "encoders": list(names["encoder"].values())},
        "pooling": spec.pooling, "normalize": spec.normalize, "dim": spec.hidden_size,
        "buckets": list(spec.buckets), "max_seq_length": spec.max_seq_length, "overflow": spec.overflow,
        "precision": spec.precision, "target": spec.target, "backend_profile": ident["embtrt.backend_profile"],
        "pooler": spec.pooler, "input_names": list(spec.input_names), "encoder_output": output_name,
        "pad_id": pad_id,
        "spec": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(spec).items()},
        "versions": versions(),
        "onnx": ({"sha256": sha256_file(encoder_onnx), "export_validation": art.validation}
                 if art is not None and encoder_onnx is not None else None),
        "parity": {**report.as_dict(), "graph": (prec.gate_run if prec is not None else "exact"),
                   "allowed_mismatch": (not report.passed) and spec.allow_mismatch},
        "max_batch_tokens": spec.max_batch_tokens,
        "bucket_max_batch": {str(b): spec.bucket_max_batch(b) for b in spec.buckets},
        "precision_onnx": prec.manifest() if prec is not None else None,
        "bundle": bundle,
        "server_python": spec.server_python,
        "tensorrt": {},
        "pending": [],
        "rebuild": rebuild_command(spec),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }

    def write_manifest() -> None:
        (repo / "embtrt.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")

    write_manifest()
    if prec is not None:  # engines read the manifest (tokenizer, pad id)
        pending, manifest["tensorrt"] = _tensorrt_engines(spec, prec, repo, texts, log)
        manifest["pending"] = pending
        write_manifest()

    log(f"[7/{steps}] checking the repository")
    rep = check_repository(repo, allow_pending_plans=spec.target == "tensorrt")
    for line in rep.lines():
        log(line)
    if not rep.passed:
        raise RepositoryError("the generated repository failed its check: " + "; ".join(rep.failures()),
                              "this is a bug in embtrt; please report it with the lines above")
    return BuildResult(repo, manifest, rep.lines(), report.lines(), pending)


__all__ = ["build", "BuildResult", "load_corpus", "EmbtrtError"]
