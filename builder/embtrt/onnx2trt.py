"""ONNX -> one TensorRT engine per length bucket, built on the GPU host.

Engines are specific to a GPU model and TensorRT version, so `embtrt build --target
tensorrt` writes, per bucket, the ONNX file, a recipe (`embtrt_engine.json`) and the
equivalent `trtexec` command; where TensorRT and CUDA are importable it builds the plans
at once, elsewhere `embtrt engines REPO` on the GPU host (e.g. a Kubernetes init step)
builds every missing, stale or foreign plan in place.

Each engine has one optimization profile: batch 1..max (opt at the largest preferred
size), sequence fixed at the bucket length, so CUDA graphs apply at every batch size.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .errors import DependencyError, ParityError, SpecError
from .modelinfo import sha256_file

RECIPE = "embtrt_engine.json"
PLAN = "1/model.plan"
PLAN_MANIFEST = "1/model.plan.json"
TIMING_CACHE = "embtrt_timing.cache"  # at the repository root, shared by every bucket
WORKSPACE_BYTES = 4 << 30
# Layers kept in fp32 with --fp32-layers: normalization, softmax, and the pooling head's reductions.
FP32_LAYER_TYPES = ("NORMALIZATION", "SOFTMAX", "REDUCE")

Log = Callable[[str], None]

if TYPE_CHECKING:  # mypy checks the calls below against tensorrt-stubs
    import tensorrt as trt


def tensorrt_available() -> tuple[bool, str]:
    """(True, "") when TensorRT imports and a CUDA device exists, else (False, the reason).

    `tensorrt-stubs` installs a `tensorrt/` folder of type stubs only, which imports as an
    empty namespace package: we look for the real API, not just a successful import.
    """
    try:
        import tensorrt as trt
    except Exception as exc:  # ImportError, or OSError when libnvinfer is missing
        return False, f"TensorRT is not importable ({type(exc).__name__}: {exc})"
    if not hasattr(trt, "Builder"):
        return False, "TensorRT is not importable (only type stubs are installed: no tensorrt.Builder)"
    try:
        import torch

        if not torch.cuda.is_available():
            return False, "no CUDA device is visible"
    except ImportError:
        return False, "torch is not importable to query CUDA"
    return True, ""


@dataclass(frozen=True)
class EngineRecipe:
    """Everything needed to rebuild one bucket's plan, stored next to it."""

    model: str
    bucket: int
    onnx: str                     # relative to the model folder
    onnx_sha256: str
    input_names: tuple[str, ...]
    min_batch: int
    opt_batch: int
    max_batch: int
    precision: str
    fp32_layers: bool
    builder_opt_level: int
    workspace_bytes: int
    calibration_file: str | None  # relative to the model folder

    def shapes(self) -> dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]]:
        L = self.bucket
        return {n: ((self.min_batch, L), (self.opt_batch, L), (self.max_batch, L)) for n in self.input_names}

    def trtexec(self, timing_cache: str) -> str:
        def dims(i: int) -> str:
            return ",".join(f"{n}:{s[i][0]}x{s[i][1]}" for n, s in self.shapes().items())

        args = ["trtexec", f"--onnx={self.onnx}", f"--saveEngine={PLAN}", f"--minShapes={dims(0)}",
                f"--optShapes={dims(1)}", f"--maxShapes={dims(2)}", f"--memPoolSize=workspace:{self.workspace_bytes >> 20}M",
                f"--builderOptimizationLevel={self.builder_opt_level}", f"--timingCacheFile={timing_cache}"]
        if self.precision in ("fp16", "bf16", "int8"):
            args.append(f"--{self.precision}")
        if self.precision == "int8":
            args.append("--calib=<calibration cache from `embtrt engines`>")
        if self.fp32_layers:
            args += ["--precisionConstraints=obey",
                     "--layerPrecisions=" + ",".join(f"*{t.lower()}*:fp32" for t in FP32_LAYER_TYPES)]
        return " ".join(shlex.quote(a) if "<" not in a else a for a in args)

    @classmethod
    def load(cls, path: Path) -> "EngineRecipe":
        d = json.loads(Path(path).read_text())
        d["input_names"] = tuple(d["input_names"])
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def write_recipes(spec, onnx_path: Path, repo: Path, log: Log = print) -> list[Path]:
    """Per bucket: model.onnx (hard link), embtrt_engine.json and trtexec.sh in the encoder folder."""
    import os
    import shutil

    if spec.precision == "fp8":
        raise SpecError("invalid precision: 'fp8' needs an explicitly quantized (Q/DQ) ONNX model",
                        "embtrt does not produce one yet; use fp16 or bf16 (or int8 with --calibration-file)")
    sha = sha256_file(onnx_path)
    opt = max(spec.preferred_batch_sizes)
    out = []
    for b in spec.buckets:
        d = repo / f"{spec.name}_{b}_encoder"
        dst = d / "model.onnx"
        try:
            os.link(onnx_path, dst)
        except OSError:
            shutil.copy2(onnx_path, dst)
        calib = None
        if spec.calibration_file is not None:
            shutil.copy2(spec.calibration_file, d / "calibration.txt")
            calib = "calibration.txt"
        r = EngineRecipe(model=d.name, bucket=b, onnx="model.onnx", onnx_sha256=sha, input_names=tuple(spec.input_names),
                         min_batch=1, opt_batch=opt, max_batch=spec.max_batch_size, precision=spec.precision,
                         fp32_layers=spec.fp32_layers, builder_opt_level=spec.builder_opt_level,
                         workspace_bytes=WORKSPACE_BYTES, calibration_file=calib)
        doc = asdict(r)
        doc["trtexec"] = r.trtexec(f"../{TIMING_CACHE}")
        (d / RECIPE).write_text(json.dumps(doc, indent=2) + "\n")
        (d / "trtexec.sh").write_text("#!/bin/sh\n# Equivalent trtexec build of this bucket's plan; run in this folder.\n"
                                      f"set -e\n{doc['trtexec']}\n")
        out.append(d / RECIPE)
    log(f"wrote {len(out)} engine recipes (embtrt_engine.json + trtexec.sh per bucket)")
    return out


@dataclass(frozen=True)
class HostInfo:
    tensorrt: str
    gpu: str
    compute_capability: str


def host_info() -> HostInfo:
    import tensorrt as trt
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return HostInfo(trt.__version__, torch.cuda.get_device_name(0), f"{major}.{minor}")


@dataclass(frozen=True)
class PlanStatus:
    model: str
    state: str    # ok | missing | stale | foreign
    message: str

    @property
    def needs_build(self) -> bool:
        return self.state != "ok"


def plan_status(model_dir: Path, host: HostInfo | None) -> PlanStatus:
    """Is the plan there, built from this ONNX, for this GPU and TensorRT version?"""
    recipe = EngineRecipe.load(model_dir / RECIPE)
    plan, man = model_dir / PLAN, model_dir / PLAN_MANIFEST
    if not plan.is_file() or not man.is_file():
        return PlanStatus(model_dir.name, "missing", f"{model_dir.name}: no plan yet")
    m = json.loads(man.read_text())
    if m.get("onnx_sha256") != recipe.onnx_sha256 or m.get("recipe") != json.loads(json.dumps(asdict(recipe))):
        return PlanStatus(model_dir.name, "stale", f"{model_dir.name}: the plan was built from another ONNX or recipe")
    if host is not None and (m.get("tensorrt") != host.tensorrt or m.get("compute_capability") != host.compute_capability
                             or m.get("gpu") != host.gpu):
        return PlanStatus(model_dir.name, "foreign",
                          f"{model_dir.name}: the plan was built for {m.get('gpu')} (sm {m.get('compute_capability')}) "
                          f"with TensorRT {m.get('tensorrt')}; this host has {host.gpu} (sm {host.compute_capability}) "
                          f"with TensorRT {host.tensorrt}. Rebuild it here, or keep one plan per GPU "
                          "(cc_model_filenames) or a per-GPU repository")
    return PlanStatus(model_dir.name, "ok", f"{model_dir.name}: plan matches")


def encoder_dirs(repo: Path) -> list[Path]:
    return sorted(p.parent for p in Path(repo).glob(f"*/{RECIPE}"))


def configure_builder(builder: "trt.Builder", network: "trt.INetworkDefinition", recipe: EngineRecipe,
                      timing_cache: bytes, calibrator: "trt.IInt8Calibrator | None" = None,
                      ) -> "tuple[trt.IBuilderConfig, trt.ITimingCache]":
    """The builder config for one bucket: profile, precision flags, fp32 layers, timing cache."""
    import tensorrt as trt

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, recipe.workspace_bytes)
    config.builder_optimization_level = recipe.builder_opt_level
    if recipe.precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    elif recipe.precision == "bf16":
        config.set_flag(trt.BuilderFlag.BF16)
    elif recipe.precision == "int8":
        config.set_flag(trt.BuilderFlag.INT8)
        config.set_flag(trt.BuilderFlag.FP16)
        if calibrator is None:
            raise SpecError("invalid precision: 'int8' needs calibration data", "pass --calibration-file")
        config.int8_calibrator = calibrator
    if recipe.fp32_layers and recipe.precision != "fp32":
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
        keep = {getattr(trt.LayerType, t) for t in FP32_LAYER_TYPES}
        for i in range(network.num_layers):
            layer = network.get_layer(i)
            if layer.type in keep:
                layer.precision = trt.float32
                for j in range(layer.num_outputs):
                    layer.set_output_type(j, trt.float32)
    profile = builder.create_optimization_profile()
    for name, (mn, opt, mx) in recipe.shapes().items():
        profile.set_shape(name, trt.Dims(list(mn)), trt.Dims(list(opt)), trt.Dims(list(mx)))
    config.add_optimization_profile(profile)
    cache = config.create_timing_cache(timing_cache)
    config.set_timing_cache(cache, False)
    return config, cache


def build_engine(model_dir: Path, timing_cache_path: Path, host: HostInfo, log: Log = print) -> Path:
    """Parse the bucket's ONNX, build its plan with the recipe, write plan + manifest."""
    import tensorrt as trt

    recipe = EngineRecipe.load(model_dir / RECIPE)
    t0 = time.time()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(model_dir / recipe.onnx)):
        errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise DependencyError(f"{model_dir.name}: TensorRT cannot parse {recipe.onnx}: {errs}",
                              "try another --opset, or report the model")
    calibrator = None
    if recipe.precision == "int8":
        calibrator = make_calibrator(model_dir, recipe)
    cache_bytes = timing_cache_path.read_bytes() if timing_cache_path.is_file() else b""
    config, cache = configure_builder(builder, network, recipe, cache_bytes, calibrator)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise DependencyError(f"{model_dir.name}: TensorRT failed to build the engine", "see the TensorRT log above")
    plan = model_dir / PLAN
    plan.parent.mkdir(exist_ok=True)
    plan.write_bytes(bytes(serialized))
    timing_cache_path.write_bytes(bytes(cache.serialize()))
    manifest = {"tensorrt": host.tensorrt, "gpu": host.gpu, "compute_capability": host.compute_capability,
                "onnx_sha256": recipe.onnx_sha256, "recipe": asdict(recipe), "shapes": recipe.shapes(),
                "trtexec": recipe.trtexec(f"../{TIMING_CACHE}"), "build_seconds": round(time.time() - t0, 1),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (model_dir / PLAN_MANIFEST).write_text(json.dumps(manifest, indent=2, default=list) + "\n")
    log(f"built {model_dir.name}/{PLAN} ({recipe.precision}, batch 1..{recipe.max_batch}, seq {recipe.bucket}) "
        f"in {manifest['build_seconds']} s")
    return plan


def make_calibrator(model_dir: Path, recipe: EngineRecipe) -> "trt.IInt8Calibrator":  # pragma: no cover - GPU only
    """Entropy calibrator over the recipe's calibration texts, padded to the bucket length."""
    import tensorrt as trt
    import torch

    from .build import backend_lib

    text_mod, _ = backend_lib()
    texts = [t for t in (model_dir / str(recipe.calibration_file)).read_text().splitlines() if t.strip()]
    repo = model_dir.parent
    front = json.loads((repo / "embtrt.json").read_text()) if (repo / "embtrt.json").is_file() else None
    pad_id = int(front["pad_id"]) if front else 0
    tok = text_mod.TextTokenizer(str(model_dir / "tokenizer.json") if (model_dir / "tokenizer.json").is_file()
                                 else str(next(repo.glob("*/1/tokenizer.json"))), recipe.bucket, pad_id)
    enc = tok.encode(texts)
    batches = [tok.pad(enc, list(range(i, min(i + recipe.opt_batch, len(texts)))), recipe.bucket, recipe.input_names)
               for i in range(0, len(texts), recipe.opt_batch)]

    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            super().__init__()
            self.i = 0
            self.buffers: dict[str, torch.Tensor] = {}

        def get_batch_size(self) -> int:
            return recipe.opt_batch

        def get_batch(self, names: list[str]) -> list[int]:
            if self.i >= len(batches):
                return []
            feeds = batches[self.i]
            self.i += 1
            self.buffers = {n: torch.from_numpy(feeds[n]).cuda() for n in names}
            return [int(self.buffers[n].data_ptr()) for n in names]

        def read_calibration_cache(self) -> bytes | None:
            p = model_dir / "calibration.cache"
            return p.read_bytes() if p.is_file() else None

        def write_calibration_cache(self, cache: Any) -> None:
            (model_dir / "calibration.cache").write_bytes(bytes(cache))

    return Calibrator()


class PlanRunner:  # pragma: no cover - GPU only
    """A deserialized plan with one execution context; torch provides the device memory."""

    def __init__(self, plan: Path) -> None:
        import tensorrt as trt

        self.runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self.engine = self.runtime.deserialize_cuda_engine(Path(plan).read_bytes())
        self.ctx = self.engine.create_execution_context()

    def run(self, feeds: dict[str, np.ndarray], output: str) -> np.ndarray:
        import torch

        dev = {n: torch.from_numpy(a).cuda() for n, a in feeds.items()}
        for n, t in dev.items():
            self.ctx.set_input_shape(n, tuple(t.shape))
            self.ctx.set_tensor_address(n, int(t.data_ptr()))
        dims = self.ctx.get_tensor_shape(output)
        shape = tuple(int(dims[i]) for i in range(len(dims)))
        out = torch.empty(shape, dtype=torch.float32, device="cuda")
        self.ctx.set_tensor_address(output, int(out.data_ptr()))
        stream = torch.cuda.Stream()
        self.ctx.execute_async_v3(stream.cuda_stream)
        stream.synchronize()
        return out.cpu().numpy()


def plan_parity(model_dir: Path, texts: list[str], gate, log: Log = print):  # pragma: no cover - GPU only
    """The plan vs its ONNX (ONNX Runtime, CPU) on the corpus texts of its bucket."""
    from .build import backend_lib
    from .parity import CosineStats, cosine_rows

    text_mod, enc_mod = backend_lib()
    recipe = EngineRecipe.load(model_dir / RECIPE)
    repo = model_dir.parent
    m = json.loads((repo / "embtrt.json").read_text())
    tok = text_mod.TextTokenizer(str(repo / m["name"] / "1" / "tokenizer.json"), int(m["max_seq_length"]), int(m["pad_id"]))
    enc = tok.encode(texts)
    lo = max([b for b in m["buckets"] if b < recipe.bucket], default=0)
    rows = [i for i, n in enumerate(enc.lengths) if lo < n <= recipe.bucket][:256] or list(range(min(32, len(texts))))
    ort = enc_mod.OrtEncoder(str(model_dir / recipe.onnx))
    runner = PlanRunner(model_dir / PLAN)
    got, want = [], []
    for s in range(0, len(rows), recipe.max_batch):
        feeds = tok.pad(enc, rows[s:s + recipe.max_batch], recipe.bucket, recipe.input_names)
        got.append(runner.run(feeds, m["encoder_output"]))
        want.append(ort.run(feeds))
    g, w = np.concatenate(got), np.concatenate(want)
    if g.ndim == 3:  # hidden states: compare the pooled vectors
        from embtrt_backend.pooling import pool_and_normalize

        mask = np.concatenate([tok.pad(enc, rows[s:s + recipe.max_batch], recipe.bucket, recipe.input_names)["attention_mask"]
                               for s in range(0, len(rows), recipe.max_batch)])
        g = pool_and_normalize(g, mask, m["pooling"], m["normalize"])
        w = pool_and_normalize(w, mask, m["pooling"], m["normalize"])
    st = CosineStats.of(cosine_rows(w, g))
    ok = st.passes(gate)
    log(f"{'[ok]' if ok else '[x]'} {model_dir.name}: plan vs ONNX on {st.n} texts: cosine p50 {st.p50:.6f} "
        f"p01 {st.p01:.6f} min {st.min:.6f}")
    return st, ok


def build_engines(repo: Path, *, force: bool = False, allow_mismatch: bool = False, texts: list[str] | None = None,
                  gate=None, log: Log = print) -> list[PlanStatus]:
    """Build every missing, stale or foreign plan in `repo`; parity-check each new plan."""
    ok, why = tensorrt_available()
    dirs = encoder_dirs(repo)
    if not dirs:
        raise SpecError(f"invalid repository: {repo} has no TensorRT engine recipes",
                        "build it with `embtrt build --target tensorrt`")
    if not ok:
        raise DependencyError(f"cannot build TensorRT engines here: {why}",
                              f"run `embtrt engines {repo}` on the GPU host that will serve it "
                              "(TensorRT and a CUDA device are needed; it can run as a Kubernetes init step)")
    from .build import load_corpus
    from .spec import Gate

    host = host_info()
    gate = gate or Gate()
    texts = texts or load_corpus()
    results = []
    for d in dirs:
        st = plan_status(d, host)
        if st.needs_build or force:
            log(f"building {d.name}: {st.message}")
            build_engine(d, Path(repo) / TIMING_CACHE, host, log)
            _, good = plan_parity(d, texts, gate, log)
            if not good and not allow_mismatch:
                (d / PLAN).unlink(missing_ok=True)
                (d / PLAN_MANIFEST).unlink(missing_ok=True)
                raise ParityError(f"{d.name}: the TensorRT plan fails the quality gate and was removed",
                                  "try --fp32-layers, or a higher precision (fp16 -> fp32, int8 -> fp16)")
            st = plan_status(d, host)
        results.append(st)
        log(f"[{st.state}] {st.message}")
    return results


def check_plans(repo: Path) -> list[PlanStatus]:
    """Plan states without building; on a host without TensorRT, foreign plans cannot be told apart."""
    ok, _ = tensorrt_available()
    host = host_info() if ok else None
    return [plan_status(d, host) for d in encoder_dirs(repo)]
