"""Repository check: every config.pbtxt parsed with Triton's model_config.proto, ensembles
cross-checked (maps, dtypes, dims, referenced models), model files present."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RepositoryError
from .budget import bucket_batch, bucket_models, expected_graph_shapes
from .bundle_record import BUNDLE_META, EXPECTED, MODEL_DEPS, bundle_python_tags, python_tag
from .config import mc, parse_config   # Triton's model_config.proto, without needing gRPC
from .manifest import Manifest, has_manifest, read_manifest

BACKEND_FILES = {"python": "model.py", "onnxruntime": "model.onnx"}
PLATFORM_FILES = {"tensorrt_plan": "model.plan", "onnxruntime_onnx": "model.onnx"}


@dataclass
class CheckReport:
    items: list[tuple[bool, str]] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # e.g. TensorRT plans to build on the GPU host

    def ok(self, msg: str) -> None:
        self.items.append((True, msg))

    def fail(self, msg: str) -> None:
        self.items.append((False, msg))

    def outcome(self, errors: list[str], ok: str | None) -> None:
        """Each error as a failure; where there is none, `ok` (when given) as a pass."""
        for e in errors:
            self.fail(e)
        if ok and not errors:
            self.ok(ok)

    @property
    def passed(self) -> bool:
        return all(ok for ok, _ in self.items)

    def failures(self) -> list[str]:
        return [m for ok, m in self.items if not ok]

    def lines(self) -> list[str]:
        return [("[ok] " if ok else "[x] ") + m for ok, m in self.items] + [f"[pending] {p}" for p in self.pending]


def _dims_compatible(a, b) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b))


def check_repository(repo: Path, allow_pending_plans: bool = False, server_python: str | None = None) -> CheckReport:
    rep = CheckReport()
    repo = Path(repo)
    configs: dict[str, mc.ModelConfig] = {}
    for d in sorted(p for p in repo.iterdir() if p.is_dir()):
        cfg_path = d / "config.pbtxt"
        if not cfg_path.is_file():
            rep.fail(f"{d.name}: no config.pbtxt (tritonserver would fail to load this folder)")
            continue
        try:
            cfg = parse_config(cfg_path)
        except RepositoryError as exc:
            rep.fail(exc.message)
            continue
        if cfg.name != d.name:
            rep.fail(f"{d.name}: config name {cfg.name!r} differs from its folder")
            continue
        configs[cfg.name] = cfg
    for name, cfg in configs.items():
        _check_model(repo / name, cfg, configs, rep, allow_pending_plans)
    if not configs:
        rep.fail(f"{repo}: no models")
    if configs and has_manifest(repo):
        try:
            man = read_manifest(repo)
        except RepositoryError as exc:
            rep.fail(exc.message + (f" ({exc.hint})" if exc.hint else ""))
            return rep
        rep.ok(f"embtrt.json: schema {man.schema_version}, model {man.name} ({man.backend_profile})")
        check_token_budget(repo, man, configs, rep)
        check_bundle(repo, man, configs, rep, server_python)
    return rep


def repositories_conflicts(repos) -> list[str]:
    """What stops several repositories from being served by one tritonserver: a model name in two
    of them, or bundles built for different server Pythons."""
    out: list[str] = []
    seen: dict[str, Path] = {}
    pythons: dict[str, list[str]] = {}
    for repo in map(Path, repos):
        for cfg in sorted(repo.glob("*/config.pbtxt")):
            name = cfg.parent.name
            if name in seen:
                out.append(f"model {name!r} is in both {seen[name]} and {repo}")
            seen.setdefault(name, repo)
        if has_manifest(repo):
            m = read_manifest(repo)
            if m.bundle:
                pythons.setdefault(m.server_python, []).append(str(repo))
    if len(pythons) > 1:
        out.append("their bundles are built for different server Pythons: "
                   + "; ".join(f"{py}: {', '.join(rs)}" for py, rs in sorted(pythons.items())))
    return out


def check_bundle(repo: Path, manifest: Manifest, configs: dict, rep: CheckReport, server_python: str | None) -> None:
    """The bundle holds what the Python models import, built for the Python they say, and (with
    server_python) for the Python that will serve them."""
    b: dict = manifest.bundle or {}
    errors: list[str] = []
    folder = repo / b["path"] if b else repo
    meta: dict = {}
    if b:
        if not (folder / BUNDLE_META).is_file():
            rep.fail(f"bundle: {b['path']}/{BUNDLE_META} is missing (copy the whole repository)")
            return
        meta = json.loads((folder / BUNDLE_META).read_text())
        tags = bundle_python_tags(folder)
        if meta["python"] != b["python"] or tags - {python_tag(b["python"])}:
            errors.append(f"bundle: recorded for Python {b['python']} but holds modules built for "
                          f"{', '.join(sorted(tags))} (metadata says {meta['python']})")
        if server_python and server_python != meta["python"]:
            errors.append(f"bundle: built for Python {meta['python']}, but the server runs Python {server_python}: "
                          f"rebuild with --server-python {server_python}")
    for name, cfg in configs.items():
        dep_file = repo / name / "1" / MODEL_DEPS
        if cfg.backend != "python" or not dep_file.is_file():
            continue
        d = json.loads(dep_file.read_text())
        mb = d.get("bundle")
        if bool(mb) != bool(b):
            errors.append(f"{name}: {MODEL_DEPS} and embtrt.json disagree on whether a bundle exists")
            continue
        if mb:
            target = (repo / name / "1" / mb["path"]).resolve()
            if target != folder.resolve() or mb["python"] != b["python"]:
                errors.append(f"{name}: points at {mb['path']} for Python {mb['python']}, not the bundle "
                              f"{b['path']} for Python {b['python']}")
            want = [m for m in d.get("requires", []) if m not in EXPECTED.get(manifest.target, [])]
            absent = [m for m in want if not ((folder / m).is_dir() or any(folder.glob(f"{m}.*")))]
            if absent:
                errors.append(f"{name}: imports {', '.join(absent)}, which the bundle lacks")
    rep.outcome(errors, f"bundle: {', '.join(f'{n} {v}' for n, v in meta['packages'].items())} for Python {meta['python']} "
                        f"({meta['size_bytes'] / 2**20:.0f} MiB) holds what every Python model imports" if b else None)


def check_token_budget(repo: Path, manifest: Manifest, configs: dict, rep: CheckReport) -> None:
    """Every bucket's models, TensorRT recipe and CUDA-graph / warm-up batch sizes agree with
    the token budget: max batch = min(max_batch_size, max_batch_tokens // bucket)."""
    budget = manifest.max_batch_tokens
    if budget is None:
        rep.fail("embtrt.json has no max_batch_tokens (written by an older embtrt): rebuild the repository")
        return
    name, cap = manifest.name, manifest.max_batch_size
    want = {int(b): bucket_batch(int(budget), int(b), cap) for b in manifest.buckets}
    errors = []
    for b, mb in want.items():
        for model in bucket_models(name, b):
            cfg = configs.get(model)
            if cfg is None:
                continue
            if cfg.max_batch_size != mb:
                errors.append(f"{model}: max_batch_size {cfg.max_batch_size}, the budget gives {mb} for the {b}-token bucket")
            sizes = {"preferred_batch_size": list(cfg.dynamic_batching.preferred_batch_size),
                     "model_warmup": [w.batch_size for w in cfg.model_warmup],
                     "graph_spec": [g.batch_size for g in cfg.optimization.cuda.graph_spec]}
            for what, vals in sizes.items():
                over = [v for v in vals if v > mb]
                if over:
                    errors.append(f"{model}: {what} {over} over the bucket's max batch {mb}")
        recipe = repo / f"{name}_{b}_encoder" / "embtrt_engine.json"
        if recipe.is_file():
            r = json.loads(recipe.read_text())
            if r.get("max_batch") != mb or r.get("max_batch_tokens") != budget or r.get("opt_batch", 0) > mb:
                errors.append(f"{recipe.parent.name}: recipe batch {r.get('min_batch')}..{r.get('max_batch')} "
                              f"(opt {r.get('opt_batch')}, budget {r.get('max_batch_tokens')}) disagrees with the "
                              f"budget {budget}: max batch {mb}")
    for model, cfg in configs.items():   # python-torch on CUDA: its graphs follow the budget too
        if "graph_shapes" in cfg.parameters:
            got, exp = cfg.parameters["graph_shapes"].string_value, expected_graph_shapes(manifest, model, int(budget))
            if got != exp:
                errors.append(f"{model}: graph_shapes {got!r}, the budget gives {exp!r}")
    front = configs.get(name)
    if front is not None and "encoder_max_batch_sizes" in front.parameters:
        got = front.parameters["encoder_max_batch_sizes"].string_value
        exp = ",".join(str(want[int(b)]) for b in manifest.buckets)
        if got != exp:
            errors.append(f"{name}: encoder_max_batch_sizes {got!r}, the budget gives {exp!r}")
    rep.outcome(errors, "token budget " + str(budget) + ": max batch per bucket "
                + ", ".join(f"{b}:{mb}" for b, mb in want.items()) + " in every config, recipe, CUDA graph and warm-up")


def _check_model(d: Path, cfg: mc.ModelConfig, configs: dict, rep: CheckReport, allow_pending: bool) -> None:
    name = cfg.name
    if cfg.platform == "ensemble":
        _check_ensemble(cfg, configs, rep)
        return
    want = BACKEND_FILES.get(cfg.backend) or PLATFORM_FILES.get(cfg.platform)
    if want is None:
        rep.fail(f"{name}: unknown backend {cfg.backend!r} / platform {cfg.platform!r}")
        return
    extra = [f for f in cfg.parameters["embtrt.files"].string_value.split(",") if f] \
        if "embtrt.files" in cfg.parameters else []
    missing = [f for f in extra if not (d / "1" / f).is_file()]
    if missing:
        rep.fail(f"{name}: missing " + ", ".join(f"1/{f}" for f in missing))
        return
    warm = sorted({i.input_data_file for w in cfg.model_warmup for i in w.inputs.values() if i.input_data_file})
    missing = [f for f in warm if not (d / "warmup" / f).is_file()]
    if missing:   # Triton would refuse to load the model
        rep.fail(f"{name}: missing warm-up data " + ", ".join(f"warmup/{f}" for f in missing))
        return
    if not (d / "1" / want).is_file():
        if want == "model.plan" and allow_pending:
            rep.pending.append(f"{name}: 1/model.plan not built yet (run `embtrt engines` on the GPU host)")
        else:
            rep.fail(f"{name}: missing 1/{want}")
            return
    if cfg.max_batch_size > 0 and not cfg.HasField("dynamic_batching"):
        rep.fail(f"{name}: max_batch_size > 0 but no dynamic_batching")
        return
    if cfg.HasField("dynamic_batching"):
        bad = [s for s in cfg.dynamic_batching.preferred_batch_size if s > cfg.max_batch_size]
        if bad:
            rep.fail(f"{name}: preferred_batch_size {bad} > max_batch_size {cfg.max_batch_size}")
            return
    if not cfg.instance_group:
        rep.fail(f"{name}: no instance_group")
        return
    rep.ok(f"{name}: {cfg.backend or cfg.platform}, max_batch_size {cfg.max_batch_size}, "
           f"{len(cfg.input)} inputs, {len(cfg.output)} outputs")


def _check_ensemble(cfg: mc.ModelConfig, configs: dict, rep: CheckReport) -> None:
    name = cfg.name
    # tensor name -> (dtype, dims) available inside the ensemble
    avail = {t.name: (t.data_type, list(t.dims)) for t in cfg.input}
    errors: list[str] = []
    for i, step in enumerate(cfg.ensemble_scheduling.step):
        sub = configs.get(step.model_name)
        if sub is None:
            errors.append(f"step {i} uses model {step.model_name!r} which is not in the repository")
            continue
        sub_in = {t.name: t for t in sub.input}
        sub_out = {t.name: t for t in sub.output}
        for key, val in step.input_map.items():
            if key not in sub_in:
                errors.append(f"step {i} ({sub.name}): input_map key {key!r} is not an input of {sub.name}")
            elif val not in avail:
                errors.append(f"step {i} ({sub.name}): input_map value {val!r} is produced by no earlier step")
            else:
                dt, dims = avail[val]
                if dt != sub_in[key].data_type:
                    errors.append(f"step {i} ({sub.name}): {val!r} is {mc.DataType.Name(dt)}, "
                                  f"{key!r} wants {mc.DataType.Name(sub_in[key].data_type)}")
                elif not _dims_compatible(dims, list(sub_in[key].dims)):
                    errors.append(f"step {i} ({sub.name}): {val!r} dims {dims} do not fit {key!r} "
                                  f"dims {list(sub_in[key].dims)}")
        missing = set(sub_in) - set(step.input_map.keys())
        missing = {m for m in missing if not sub_in[m].optional}
        if missing:
            errors.append(f"step {i} ({sub.name}): inputs {sorted(missing)} are not mapped")
        for key, val in step.output_map.items():
            if key not in sub_out:
                errors.append(f"step {i} ({sub.name}): output_map key {key!r} is not an output of {sub.name}")
            else:
                avail[val] = (sub_out[key].data_type, list(sub_out[key].dims))
        if sub.max_batch_size < cfg.max_batch_size:
            errors.append(f"step {i} ({sub.name}): max_batch_size {sub.max_batch_size} < ensemble's "
                          f"{cfg.max_batch_size}")
    for out in cfg.output:
        if out.name not in avail:
            errors.append(f"output {out.name!r} is produced by no step")
        elif avail[out.name][0] != out.data_type or not _dims_compatible(avail[out.name][1], list(out.dims)):
            errors.append(f"output {out.name!r}: steps produce {mc.DataType.Name(avail[out.name][0])} "
                          f"{avail[out.name][1]}, config says {mc.DataType.Name(out.data_type)} {list(out.dims)}")
    rep.outcome([f"{name}: {e}" for e in errors],
                f"{name}: ensemble " + " -> ".join(s.model_name for s in cfg.ensemble_scheduling.step))
