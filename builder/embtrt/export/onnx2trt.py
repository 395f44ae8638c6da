"""Precision ONNX -> one strongly typed TensorRT engine per length bucket, built on the GPU host.

Engines are specific to a GPU model and TensorRT version, so `embtrt build --target
tensorrt` writes, per bucket, the precision ONNX the gate accepted (`model.onnx`), a recipe
(`embtrt_engine.json`) and the equivalent `trtexec` command; where TensorRT and a GPU are
present it builds the plans at once, elsewhere `embtrt engines REPO` on the GPU host (e.g. a
Kubernetes init container beside Triton's TensorRT backend) builds every missing, stale or
foreign plan in place.

Strong typing only: TensorRT 11 removed the precision builder flags, the calibrators and
per-layer precision (and 10.12+ deprecates them). The network is created with
`NetworkDefinitionCreationFlag.STRONGLY_TYPED` (required on 10.x, ignored on 11.x, where it
is always on), so the engine computes in exactly the types of its ONNX graph: precision is
decided in `embtrt.precision`, on a file the gate judged. This module only parses, sets
the optimization profile and builds.

Each engine has one optimization profile: batch 1..max for that bucket (from the token
budget), opt at the largest preferred size, sequence fixed at the bucket length, so CUDA
graphs apply at every batch size. The GPU host needs no PyTorch: NVML (nvidia-ml-py) names
the GPU, Polygraphy's TensorRT runner runs a plan for the parity check.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from embtrt_backend.kinds import kind_of

from ..common.files import link_or_copy as _link
from ..common.files import sha256_file
from ..common.gpu import gpu_info, tensorrt_available
from ..common.log import Log
from ..common.plugins import implementation
from ..errors import DependencyError, ParityError, SpecError
from ..reference.parity import CosineStats, cosine_rows
from ..repository.manifest import has_manifest, read_manifest

RECIPE = "embtrt_engine.json"
PLAN = "1/model.plan"
PLAN_MANIFEST = "1/model.plan.json"
GATE_ONNX = "gate.onnx"          # the graph the gate ran, where it is not model.onnx (bf16: a simulation)
TIMING_CACHE = "embtrt_timing.cache"  # at the repository root, shared by every bucket
WORKSPACE_BYTES = 4 << 30


if TYPE_CHECKING:  # mypy checks the calls below against tensorrt-stubs
    import tensorrt as trt


@dataclass(frozen=True)
class EngineRecipe:
    """Everything needed to rebuild one bucket's plan, stored next to it."""

    model: str
    bucket: int
    onnx: str                     # relative to the model folder: the precision ONNX the gate accepted
    onnx_sha256: str
    gate_onnx: str                # the graph the gate ran (model.onnx, or gate.onnx for a bf16 simulation)
    gate_onnx_sha256: str
    gate_run: str                 # exact | simulated
    precision: str                # what the ONNX graph holds; no builder flag depends on it
    input_names: tuple[str, ...]
    min_batch: int
    opt_batch: int
    max_batch: int
    max_batch_tokens: int
    builder_opt_level: int
    workspace_bytes: int
    strongly_typed: bool = True
    # TF32 math for fp32 tensors (TensorRT's default): off where a gate bounds values at 1e-4
    # (rerankers' and sparse encoders' fp32 plans), since TF32 rounds matmul inputs to 10 bits
    tf32: bool = True

    def shapes(self) -> dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]]:
        L = self.bucket
        return {n: ((self.min_batch, L), (self.opt_batch, L), (self.max_batch, L)) for n in self.input_names}

    def trtexec(self, timing_cache: str) -> str:
        """The equivalent trtexec build. Only flags TensorRT 10 and 11 both accept: --stronglyTyped
        is required on 10.x and a no-op on 11.x; no precision or per-layer precision flags."""
        def dims(i: int) -> str:
            return ",".join(f"{n}:{s[i][0]}x{s[i][1]}" for n, s in self.shapes().items())

        args = ["trtexec", f"--onnx={self.onnx}", f"--saveEngine={PLAN}", "--stronglyTyped",
                *([] if self.tf32 else ["--noTF32"]),
                f"--minShapes={dims(0)}", f"--optShapes={dims(1)}", f"--maxShapes={dims(2)}",
                f"--memPoolSize=workspace:{self.workspace_bytes >> 20}M",
                f"--builderOptimizationLevel={self.builder_opt_level}", f"--timingCacheFile={timing_cache}"]
        return " ".join(shlex.quote(a) for a in args)

    @classmethod
    def load(cls, path: Path) -> "EngineRecipe":
        d = json.loads(Path(path).read_text())
        d["input_names"] = tuple(d["input_names"])
        missing = [k for k in cls.__dataclass_fields__ if k not in d and k not in ("strongly_typed", "tf32")]
        if missing:
            raise SpecError(f"invalid recipe {path}: missing {', '.join(missing)} (written by an older embtrt?)",
                            "rebuild the repository with this embtrt: `embtrt build --target tensorrt ...`")
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def write_recipes(spec, art, repo: Path, log: Log = print) -> list[Path]:
    """Per bucket: model.onnx (the precision ONNX the gate accepted), gate.onnx where the gate ran
    another graph, embtrt_engine.json and trtexec.sh in the encoder folder."""
    out = []
    for b in spec.buckets:
        d = repo / f"{spec.name}_{b}_encoder"
        src, gate = art.by_bucket[b], art.gate_by_bucket[b]
        _link(src, d / "model.onnx")
        gate_rel = "model.onnx" if gate == src else GATE_ONNX
        if gate != src:
            _link(gate, d / GATE_ONNX)
        mb = spec.bucket_max_batch(b)
        r = EngineRecipe(model=d.name, bucket=b, onnx="model.onnx", onnx_sha256=sha256_file(d / "model.onnx"),
                         gate_onnx=gate_rel, gate_onnx_sha256=sha256_file(d / gate_rel), gate_run=art.gate_run,
                         precision=spec.precision, input_names=tuple(spec.input_names), min_batch=1,
                         opt_batch=max(spec.bucket_preferred(b)), max_batch=mb, max_batch_tokens=spec.max_batch_tokens,
                         builder_opt_level=spec.builder_opt_level, workspace_bytes=WORKSPACE_BYTES,
                         tf32=kind_of(spec.kind).tf32 or spec.precision != "fp32")
        doc = asdict(r)
        doc["trtexec"] = r.trtexec(f"../{TIMING_CACHE}")
        (d / RECIPE).write_text(json.dumps(doc, indent=2) + "\n")
        (d / "trtexec.sh").write_text("#!/bin/sh\n# Equivalent trtexec build of this bucket's plan (TensorRT 10 or 11); "
                                      f"run in this folder.\nset -e\n{doc['trtexec']}\n")
        out.append(d / RECIPE)
    log(f"wrote {len(out)} engine recipes (embtrt_engine.json + trtexec.sh per bucket, strongly typed, {spec.precision} in the ONNX)")
    return out


def recipes_and_plans(spec, prec, repo: Path, texts: list[str], log: Log) -> tuple[list[str], dict]:
    """Write the per-bucket recipes; build the plans now where TensorRT and a GPU exist."""
    write_recipes(spec, prec, repo, log=log)
    ok, why = tensorrt_available()
    if not ok:
        log(f"TensorRT plans not built here: {why}.")
        log(f"Finish on the GPU host: embtrt engines {spec.out}")
        return ([f"{spec.name}_{b}_encoder/1/model.plan" for b in spec.buckets],
                {"built": False, "reason": why, "finish_with": f"embtrt engines {spec.out}"})
    states = build_engines(repo, allow_mismatch=spec.allow_mismatch, texts=texts, gate=spec.gate, log=log)
    return [], {"built": True, "plans": {s.model: s.state for s in states}}


@dataclass(frozen=True)
class HostInfo:
    tensorrt: str
    gpu: str
    compute_capability: str


def host_info() -> HostInfo:
    import tensorrt as trt

    gpu, cc = gpu_info()
    return HostInfo(trt.__version__, gpu, cc)


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
    if m.get("onnx_sha256") != recipe.onnx_sha256 or _as_built(m.get("recipe")) != json.loads(json.dumps(asdict(recipe))):
        return PlanStatus(model_dir.name, "stale", f"{model_dir.name}: the plan was built from another ONNX or recipe")
    if host is not None and (m.get("tensorrt") != host.tensorrt or m.get("compute_capability") != host.compute_capability
                             or m.get("gpu") != host.gpu):
        return PlanStatus(model_dir.name, "foreign",
                          f"{model_dir.name}: the plan was built for {m.get('gpu')} (sm {m.get('compute_capability')}) "
                          f"with TensorRT {m.get('tensorrt')}; this host has {host.gpu} (sm {host.compute_capability}) "
                          f"with TensorRT {host.tensorrt}. Rebuild it here, or keep one plan per GPU "
                          "(cc_model_filenames) or a per-GPU repository")
    return PlanStatus(model_dir.name, "ok", f"{model_dir.name}: plan matches")


def _as_built(stored: dict | None) -> dict | None:
    """A plan manifest's recipe with the fields an older embtrt did not write at their defaults
    (a plan built before a field existed was built as that default says: TF32 on)."""
    return None if stored is None else {"strongly_typed": True, "tf32": True, **stored}


def encoder_dirs(repo: Path) -> list[Path]:
    return sorted(p.parent for p in Path(repo).glob(f"*/{RECIPE}"))


def create_network(builder: "trt.Builder") -> "trt.INetworkDefinition":
    """A strongly typed network: required on TensorRT 10.x, always on (flag ignored) on 11.x."""
    import tensorrt as trt

    return builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))


def configure_builder(builder: "trt.Builder", recipe: EngineRecipe, timing_cache: bytes) -> "trt.IBuilderConfig":
    """The builder config for one bucket: workspace, optimization level, profile, timing cache.
    No precision: a strongly typed network takes its types from the ONNX graph."""
    import tensorrt as trt

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, recipe.workspace_bytes)
    config.builder_optimization_level = recipe.builder_opt_level
    if not recipe.tf32:
        config.clear_flag(trt.BuilderFlag.TF32)
    profile = builder.create_optimization_profile()
    for name, (mn, opt, mx) in recipe.shapes().items():
        profile.set_shape(name, trt.Dims(list(mn)), trt.Dims(list(opt)), trt.Dims(list(mx)))
    config.add_optimization_profile(profile)
    cache = config.create_timing_cache(timing_cache)
    config.set_timing_cache(cache, False)
    return config


def build_engine(model_dir: Path, timing_cache_path: Path, host: HostInfo, log: Log = print) -> Path:
    """Parse the bucket's precision ONNX, build its plan with the recipe, write plan + manifest."""
    import tensorrt as trt

    recipe = EngineRecipe.load(model_dir / RECIPE)
    if sha256_file(model_dir / recipe.onnx) != recipe.onnx_sha256:
        raise SpecError(f"{model_dir.name}: {recipe.onnx} is not the file the quality gate accepted (sha256 differs)",
                        "rebuild the repository with `embtrt build`; never edit model.onnx by hand")
    t0 = time.time()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = create_network(builder)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(model_dir / recipe.onnx)):
        errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise DependencyError(f"{model_dir.name}: TensorRT cannot parse {recipe.onnx}: {errs}",
                              "try another --opset, or report the model")
    cache_bytes = timing_cache_path.read_bytes() if timing_cache_path.is_file() else b""
    config = configure_builder(builder, recipe, cache_bytes)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise DependencyError(f"{model_dir.name}: TensorRT failed to build the engine", "see the TensorRT log above")
    plan = model_dir / PLAN
    plan.parent.mkdir(exist_ok=True)
    plan.write_bytes(bytes(serialized))
    timing_cache_path.write_bytes(bytes(config.get_timing_cache().serialize()))
    manifest = {"tensorrt": host.tensorrt, "gpu": host.gpu, "compute_capability": host.compute_capability,
                "onnx_sha256": recipe.onnx_sha256, "recipe": asdict(recipe), "shapes": recipe.shapes(),
                "strongly_typed": True, "trtexec": recipe.trtexec(f"../{TIMING_CACHE}"),
                "build_seconds": round(time.time() - t0, 1),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (model_dir / PLAN_MANIFEST).write_text(json.dumps(manifest, indent=2, default=list) + "\n")
    log(f"built {model_dir.name}/{PLAN} (strongly typed, {recipe.precision} ONNX, batch 1..{recipe.max_batch}, "
        f"seq {recipe.bucket}) in {manifest['build_seconds']} s")
    return plan


class PlanRunner:  # pragma: no cover - GPU only
    """A deserialized plan run by Polygraphy's TensorRT runner (its own CUDA bindings: no PyTorch)."""

    def __init__(self, plan: Path) -> None:
        from polygraphy.backend.trt import EngineFromBytes, TrtRunner

        self._runner = TrtRunner(EngineFromBytes(Path(plan).read_bytes()))
        self._runner.activate()

    def run(self, feeds: dict[str, np.ndarray], output: str) -> np.ndarray:
        return np.asarray(self._runner.infer(feed_dict=feeds)[output], dtype=np.float32)

    def close(self) -> None:
        self._runner.deactivate()


def plan_parity(model_dir: Path, texts: list[str], gate, log: Log = print, runner_cls=None):
    """The plan vs the graph the build's gate ran (ONNX Runtime, CPU) on the corpus texts of its
    bucket: model.onnx itself, or for bf16 the simulation of it (gate.onnx), judged by the kind's head
    (Kind.plan_check): a pooled head by the cosine of its vectors under the recorded gate (pooled_plan_check);
    scores and sparse weights by max |difference| in their gate's units and bounds for the precision."""
    from ..common.backend import backend_lib

    text_mod, enc_mod = backend_lib()
    recipe = EngineRecipe.load(model_dir / RECIPE)
    repo = model_dir.parent
    m = read_manifest(repo)
    tok = text_mod.TextTokenizer(str(repo / m.name / "1" / "tokenizer.json"), m.max_seq_length, m.pad_id)
    enc = tok.encode(texts)
    lo = max([b for b in m.buckets if b < recipe.bucket], default=0)
    rows = [i for i, n in enumerate(enc.lengths) if lo < n <= recipe.bucket][:256] or list(range(min(32, len(texts))))
    # a simulated graph runs exactly as written: the optimizer would drop its rounding casts
    ort = enc_mod.OrtEncoder(str(model_dir / recipe.gate_onnx), optimize=recipe.gate_run == "exact")
    runner = (runner_cls or PlanRunner)(model_dir / PLAN)
    got, want, masks = [], [], []
    for s in range(0, len(rows), recipe.max_batch):
        feeds = tok.pad(enc, rows[s:s + recipe.max_batch], recipe.bucket, recipe.input_names)
        got.append(runner.run(feeds, m.encoder_output))
        want.append(ort.run(feeds))
        masks.append(feeds["attention_mask"])
    runner.close()
    g, w = np.concatenate(got), np.concatenate(want)
    what_ran = f"{model_dir.name}: plan vs {recipe.gate_onnx} ({recipe.gate_run}) on"
    kind = kind_of(m.kind)
    if not kind.plan_check:
        raise SpecError(f"no TensorRT plan check for {kind.label} model", "its kind is not built for the tensorrt target")
    figure, ok, line = implementation(kind, "plan_check")(m, g, w, masks, gate)   # its head's own units and bounds
    log(f"{'[ok]' if ok else '[x]'} {what_ran} {line}")
    return figure, ok


def pooled_plan_check(m, got: np.ndarray, want: np.ndarray, masks: list, gate) -> tuple[CosineStats, bool, str]:
    """A pooled head's plan (the embedder's, Kind.plan_check) against its gated graph: the vectors' cosine
    (hidden states pooled and normalized as served first) under the build's gate."""
    if got.ndim == 3:  # hidden states: compare the pooled vectors
        from embtrt_backend.pooling import pool_and_normalize

        mask = np.concatenate(masks)
        got = pool_and_normalize(got, mask, m.pooling, m.normalize)
        want = pool_and_normalize(want, mask, m.pooling, m.normalize)
    st = CosineStats.of(cosine_rows(want, got))
    return st, st.passes(gate), f"{st.n} texts: cosine p50 {st.p50:.6f} p01 {st.p01:.6f} min {st.min:.6f}"


def build_engines(repo: Path, *, force: bool = False, allow_mismatch: bool = False, texts: list[str] | None = None,
                  gate=None, log: Log = print, runner_cls=None) -> list[PlanStatus]:
    """Build every missing, stale or foreign plan in `repo`; parity-check each new plan."""
    ok, why = tensorrt_available()
    dirs = encoder_dirs(repo)
    if not dirs:
        raise SpecError(f"invalid repository: {repo} has no TensorRT engine recipes",
                        "build it with `embtrt build --target tensorrt`")
    if not ok:
        raise DependencyError(f"cannot build TensorRT engines here: {why}",
                              f"run `embtrt engines {repo}` on the GPU host that will serve it "
                              "(TensorRT, nvidia-ml-py and a GPU are needed: pip install 'embtrt[tensorrt]'; "
                              "it can run as a Kubernetes init container)")
    from ..common.corpus import load_corpus
    from ..repository.gate import Gate

    host = host_info()
    if gate is None:  # the gate the build used (its thresholds are in embtrt.json), else DESIGN.md's
        gate = read_manifest(repo).gate if has_manifest(repo) else Gate()
    texts = texts or load_corpus()
    results = []
    for d in dirs:
        st = plan_status(d, host)
        if st.needs_build or force:
            log(f"building {d.name}: {st.message}")
            build_engine(d, Path(repo) / TIMING_CACHE, host, log)
            _, good = plan_parity(d, texts, gate, log, runner_cls)
            if not good and not allow_mismatch:
                (d / PLAN).unlink(missing_ok=True)
                (d / PLAN_MANIFEST).unlink(missing_ok=True)
                raise ParityError(f"{d.name}: the TensorRT plan fails the quality gate and was removed",
                                  "rebuild with --fp32-layers, or a higher precision (fp16 -> fp32, int8 -> fp16)")
            st = plan_status(d, host)
        results.append(st)
        log(f"[{st.state}] {st.message}")
    return results


def check_plans(repo: Path) -> list[PlanStatus]:
    """Plan states without building; on a host without TensorRT, foreign plans cannot be told apart."""
    ok, _ = tensorrt_available()
    host = host_info() if ok else None
    return [plan_status(d, host) for d in encoder_dirs(repo)]
