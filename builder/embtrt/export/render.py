"""Render every model of the repository contract from the Jinja2 templates.

All decisions are made here; the templates in model_repository_templates/ only print.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from embtrt_backend.kinds import SPARSE_WEIGHTS, TOKEN_VECTORS, kind_of

from .. import __version__
from ..common.files import link_or_copy
from ..common.resources import python_backend_dir, templates_dir
from ..errors import RepositoryError
from ..repository.bundle_record import DEPS_DIR, model_requires, python_tag
from .spec import LONG_INPUT, BuildSpec

MAX_TEXT_BYTES = 1 << 20  # texts above 1 MiB are rejected, never truncated silently by bytes
# rows over this many tokens are "long" for the front door's reserve rule (embtrt_backend.long_rows:
# at most instances - 1 front-door instances run them at once); its DEFAULT_TOKENS, rendered so that
# an operator sees and can edit it in config.pbtxt
LONG_ROW_TOKENS = 1024
CALIBRATION_FILE = "embtrt_calibration.npy"  # the front door's calibration vectors (int8 / uint8 ranges)
GPU_TARGETS = ("tensorrt",)


def _q(value: object) -> str:
    """A protobuf text-format string literal."""
    s = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{s}"'


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = _q
    return env


@dataclass
class ModelPlan:
    """One model directory: its config template and context, and the files it needs."""

    name: str
    template: str
    context: dict
    files: dict[str, Path] = field(default_factory=dict)  # "1/model.onnx" -> source
    backend_code: str | None = None                         # python_backend/<dir>/model.py
    kind: str = ""
    deps: dict | None = None                                # 1/embtrt_deps.json of a Python model
    data: dict[str, bytes] = field(default_factory=dict)     # "warmup/sample_text" -> contents


def model_names(spec: BuildSpec) -> dict[str, Any]:
    n = spec.name
    return {
        "front": n,
        "ensemble": {b: f"{n}_{b}" for b in spec.buckets},
        "tokenizer": {b: f"{n}_{b}_tokenizer" for b in spec.buckets},
        "encoder": {b: f"{n}_{b}_encoder" for b in spec.buckets},
        "pooler": {b: f"{n}_{b}_pooler" for b in spec.buckets},
    }


def _t(name: str, dtype: str, dims: list[int]) -> dict:
    return {"name": name, "data_type": dtype, "dims": dims}


WARMUP_TEXT = "warm up"     # the front door's warm-up text (a valid, short input of every kind)
WARMUP_FILE = "sample_text"  # in NAME/warmup/: WARMUP_TEXT as Triton reads a TYPE_STRING element


def front_warmup(spec: BuildSpec, inputs: list[dict]) -> list[dict]:
    """The front door's model_warmup: one row of WARMUP_TEXT in every text input, run by each instance
    before the model is ready. Measured on MiniLM (python-ort, 2 instances, AMD EPYC 2 cores): the
    first request to each instance took 56-72 ms without it, 10 ms with it (the next ones 10-13 ms);
    a warm-up of the encoder alone inside initialize() did not change it, so the cost is in the stub's
    first request, not the runtime. Not an empty text (Triton's zero_data): a tokenizer that adds no
    special tokens makes it a row of no tokens. Local encoder mode only: over BLS the warm-up would
    call encoder models that may still be loading."""
    if spec.router_mode != "local":
        return []
    return [{"name": "sample_text", "batch_size": 1, "inputs": [dict(t, file=WARMUP_FILE) for t in inputs]}]


def warmup_data(spec: BuildSpec) -> dict[str, bytes]:
    """NAME/warmup/sample_text, where front_warmup names it: a 4-byte little-endian length, then the UTF-8
    bytes (Triton's layout of one TYPE_STRING element in an input_data_file)."""
    if spec.router_mode != "local":
        return {}
    raw = WARMUP_TEXT.encode("utf-8")
    return {f"warmup/{WARMUP_FILE}": len(raw).to_bytes(4, "little") + raw}


def _batching(spec: BuildSpec, preferred: tuple[int, ...] | None = None) -> dict:
    return {
        "preferred_batch_sizes": list(preferred or spec.preferred_batch_sizes),
        "max_queue_delay_us": spec.max_queue_delay_us,
        "max_queue_size": spec.max_queue_size,
        "queue_timeout_us": spec.queue_timeout_us,
    }


def _group(count: int, gpu: bool, profiles: list[str] | None = None) -> dict:
    return {"count": count, "kind": "KIND_GPU" if gpu else "KIND_CPU", "gpus": [0] if gpu else [],
            "profiles": profiles or []}


def encoder_dims(spec: BuildSpec, bucket: int) -> int:
    """TensorRT engines have the sequence fixed at the bucket; ONNX Runtime takes any length."""
    return bucket if spec.target in GPU_TARGETS else -1


def graph_batch_sizes(spec: BuildSpec, bucket: int) -> list[int]:
    """CUDA-graph batch sizes = the bucket's preferred batch sizes, plus 1 for single requests."""
    return sorted({1, *spec.bucket_preferred(bucket)})


def hf_files(model_dir: Path) -> dict[str, Path]:
    """The model folder's own files the python-torch encoder loads (config and weights)."""
    keep = (".json", ".safetensors", ".bin", ".py", ".txt", ".model", ".jinja")   # .jinja: a chat template
    return {f"1/hf/{f.name}": f for f in sorted(Path(model_dir).iterdir())
            if f.is_file() and f.suffix in keep and not f.name.startswith(".")}


def torch_dir(spec: BuildSpec) -> Path:
    """The folder the python-torch encoder runs: the model's, an inference-free SPLADE's document
    route's MLM folder inside it, or the Hugging Face files' folder of an old CLIPModel module."""
    sub = spec.sparse_encoder_dir or spec.hf_subdir
    return spec.model_dir / sub if sub else spec.model_dir


def encoder_files(spec: BuildSpec, onnx_path: Path | None) -> dict[str, Path]:
    if spec.target == "python-torch":
        return hf_files(torch_dir(spec))
    assert onnx_path is not None
    return {"1/model.onnx": onnx_path}


# The engine a Python-backend encoder runs, per target ("runtime" parameter of the model).
RUNTIMES = {"python-ort": "onnxruntime", "python-openvino": "openvino", "python-torch": "torch"}
RUNTIME_LABELS = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO", "torch": "PyTorch"}


def runtime_params(spec: BuildSpec, encoder_output: str, buckets: tuple[int, ...] | None = None) -> list[tuple[str, str]]:
    """What a Python-backend encoder (or a local front door) needs to run the encoder (`buckets`: the
    buckets it runs, where that is not every one)."""
    return [("runtime", RUNTIMES.get(spec.target, "onnxruntime")), ("precision", spec.precision),
            ("encoder_output", encoder_output), ("intra_op_threads", str(spec.ort_threads)),
            ("ort_spinning", str(spec.ort_spinning).lower()), ("pooler", spec.pooler), ("pooling", spec.pooling),
            ("normalize", str(spec.normalize).lower()), ("input_names", ",".join(spec.input_names)),
            # long inputs: give each run's memory back instead of caching the peak per instance
            ("ort_arena", str(spec.max_seq_length < LONG_INPUT).lower()), *_kind_params(spec),
            # a python-torch encoder loads the model's own code (copied into 1/hf/) only where the
            # build was told to trust it, as the build itself did
            *([("trust_remote_code", "true")] if spec.trust_remote_code and spec.target == "python-torch" else []),
            *_device_params(spec, buckets)]


def _device_params(spec: BuildSpec, buckets: tuple[int, ...] | None) -> list[tuple[str, str]]:
    """python-torch's device, and on CUDA the graphs it captures at load (`buckets`: a bucket
    encoder's own; None: every bucket, the front door that runs them all)."""
    if spec.target != "python-torch":
        return []
    from embtrt_backend.torch_graphs import format_graph_shapes

    out = [("device", spec.device)]
    if spec.device == "cuda":
        out += [("cuda_graphs", str(spec.cuda_graphs).lower()),
                ("graph_shapes", format_graph_shapes(spec.graph_shapes(buckets)))]
    return out


def _kind_params(spec: BuildSpec) -> list[tuple[str, str]]:
    """A reranker's or sparse encoder's kind, and SPLADE's pooling, activation and graph top-K: what
    its python-torch encoder computes in place of the graph (embtrt_backend.torch_encoder); the
    sparse front door also reads graph_max_active_dims (a request may ask for at most that K)."""
    kind = kind_of(spec.kind)
    if kind is kind_of(None):   # a front door naming no kind is read as the default's (torch_encoder.from_params): none rendered
        return []
    out = [("kind", spec.kind)]
    if kind.has(TOKEN_VECTORS):   # every encoder (bucket encoders too): no column trimming, the head's layout
        mv = dict(spec.multivector)
        out += [("trim_padding", "false"), ("mv_layout", mv.get("mv_layout", "")), ("mv_normalize", mv.get("mv_normalize", "true"))]
    if kind.has(SPARSE_WEIGHTS):
        out += [("splade_pooling", spec.splade_pooling), ("splade_activation", spec.activation)]
        if spec.active_dims_in_graph:
            out.append(("graph_max_active_dims", str(spec.sparse_max_active_dims)))
    return out


def bls_params(spec: BuildSpec) -> dict[str, str]:
    """The front door's encoder parameters: local, or the bucket encoder models it calls."""
    if spec.router_mode == "local":
        return {"encoder_mode": "local"}
    return {"encoder_mode": "bls", "encoder_models": ",".join(model_names(spec)["encoder"][b] for b in spec.buckets)}


def front_params(spec: BuildSpec, pad_id: int, output: str) -> dict[str, str]:
    """The parameters every kind's front door takes (the request core's and the encoder's); a kind
    adds its own (`FrontDoorBuild.params`)."""
    p = dict(runtime_params(spec, output))
    p.update({"max_seq_length": str(spec.max_seq_length), "pad_id": str(pad_id), "max_text_bytes": str(MAX_TEXT_BYTES),
              "buckets": ",".join(map(str, spec.buckets)),
              "encoder_max_batch_sizes": ",".join(str(spec.bucket_max_batch(b)) for b in spec.buckets),
              "max_batch_tokens": str(spec.max_batch_tokens), "pad_to_bucket": str(spec.pad_to_bucket).lower(),
              **bls_params(spec), "run_overhead_tokens": str(spec.run_overhead_tokens),
              "long_row_tokens": str(LONG_ROW_TOKENS), "stage_timers": str(spec.stage_timers).lower(),
              "prompts": json.dumps(spec.prompt_map, sort_keys=True), "default_prompt_name": spec.default_prompt_name or ""})
    return p


def plan_repository(spec: BuildSpec, *, onnx_paths: dict[int, Path | None], encoder_output: str,
                    tokenizer_json: Path, pad_id: int, identity: dict[str, str],
                    plan_paths: dict[int, Path] | None = None, calibration: Path | None = None) -> list[ModelPlan]:
    names = model_names(spec)
    H = spec.hidden_size
    idp = sorted(identity.items())
    common = {"version": __version__, "max_batch_size": spec.max_batch_size}
    text_in = [_t("TEXT", "TYPE_STRING", [1])]
    emb_out = [_t("EMBEDDING", "TYPE_FP32", [H])]
    pool_inputs = lambda rows: [_t("last_hidden_state", "TYPE_FP32", [rows, H]), _t("attention_mask", "TYPE_INT64", [rows])]
    # the front door answers request options: a width (dimensions) and a vector type per request;
    # TOKENS: each text's token count (usage), so that a caller need not tokenize again
    front_out = [_t("EMBEDDING", "TYPE_FP32", [-1]), _t("EMBEDDING_INT8", "TYPE_INT8", [-1]),
                 _t("EMBEDDING_UINT8", "TYPE_UINT8", [-1]), _t("TOKENS", "TYPE_INT64", [1])]
    prompt_params = [("prompts", json.dumps(spec.prompt_map, sort_keys=True)),
                     ("default_prompt_name", spec.default_prompt_name or ""),
                     ("include_prompt", str(spec.include_prompt).lower())]
    shared = [
        ("max_seq_length", str(spec.max_seq_length)), ("pad_id", str(pad_id)), ("overflow", spec.overflow),
        ("overflow_stride", str(spec.overflow_stride)),
        ("input_names", ",".join(spec.input_names)), ("max_text_bytes", str(MAX_TEXT_BYTES)),
    ]
    plans: list[ModelPlan] = []
    front = {**front_params(spec, pad_id, encoder_output), "overflow": spec.overflow, "overflow_stride": str(spec.overflow_stride),
             "encoder_models": ",".join(names["encoder"][b] for b in spec.buckets), **dict(prompt_params),
             "dimensions": ",".join(map(str, spec.dimensions)) if spec.dimensions is not None else ""}
    front_files = {"1/tokenizer.json": tokenizer_json}
    if calibration is not None:
        front_files[f"1/{CALIBRATION_FILE}"] = calibration
    if spec.router_mode == "local":
        front_files.update(encoder_files(spec, onnx_paths[spec.buckets[0]]))
    plans.append(ModelPlan(
        name=spec.name, template="router.pbtxt.j2", kind="front door",
        context={**common, "name": spec.name, "inputs": text_in, "outputs": front_out,
                 "batching": _batching(spec), "group": _group(spec.front_instances, spec.front_on_gpu),
                 "params": sorted(front.items()) + idp, "warmup": front_warmup(spec, text_in)},
        files=front_files, backend_code="router", data=warmup_data(spec),
    ))
    for b in spec.buckets:
        bcommon = {**common, "max_batch_size": spec.bucket_max_batch(b)}  # the token budget's rows
        bbatch = _batching(spec, spec.bucket_preferred(b))
        tok_name, enc_name, pool_name, ens_name = (names[k][b] for k in ("tokenizer", "encoder", "pooler", "ensemble"))
        enc_outputs = [_t(encoder_output, "TYPE_FP32", [H] if spec.fused else [encoder_dims(spec, b), H])]
        skip_prompt = not spec.include_prompt and bool(spec.default_prompt)
        tok_outputs = [_t(n, "TYPE_INT64", [b]) for n in spec.input_names]
        if skip_prompt:  # the pooler's mask leaves the default prompt's tokens out
            tok_outputs.append(_t("pooling_mask", "TYPE_INT64", [b]))
        plans.append(ModelPlan(
            name=tok_name, template="tokenizer.pbtxt.j2", kind="tokenizer",
            context={**bcommon, "name": tok_name, "inputs": text_in,
                     "outputs": tok_outputs,
                     "batching": bbatch, "group": _group(spec.instances, False),
                     "params": sorted(shared + prompt_params + [("bucket", str(b)), ("front_door", spec.name),
                                                ("largest_bucket", str(b == spec.buckets[-1]).lower())]) + idp},
            files={"1/tokenizer.json": tokenizer_json}, backend_code="tokenizer",
        ))
        plans.append(_encoder_plan(spec, b, enc_name, enc_outputs, encoder_output, onnx_paths, plan_paths or {}, idp))
        steps = [{"model": tok_name, "input_map": [("TEXT", "TEXT")],
                  "output_map": [(n, n) for n in spec.input_names] + ([("pooling_mask", "pooling_mask")] if skip_prompt else [])},
                 {"model": enc_name, "input_map": [(n, n) for n in spec.input_names],
                  "output_map": [(encoder_output, "EMBEDDING" if spec.fused else "hidden")]}]
        if not spec.fused:
            steps.append({"model": pool_name,
                          "input_map": [("last_hidden_state", "hidden"),
                                        ("attention_mask", "pooling_mask" if skip_prompt else "attention_mask")],
                          "output_map": [("EMBEDDING", "EMBEDDING")]})
            plans.append(ModelPlan(
                name=pool_name, template="pooler.pbtxt.j2", kind="pooler",
                context={**bcommon, "name": pool_name, "pooling": spec.pooling, "normalize": spec.normalize,
                         "inputs": pool_inputs(-1), "outputs": emb_out, "batching": bbatch, "group": _group(spec.instances, False),
                         "params": sorted([("pooling", spec.pooling),
                                           ("normalize", str(spec.normalize).lower())]) + idp,
                         "warmup": [{"name": f"bucket_{b}", "batch_size": 1, "inputs": pool_inputs(b)}]},
                backend_code="pooler",
            ))
        plans.append(ModelPlan(
            name=ens_name, template="ensemble.pbtxt.j2", kind="ensemble",
            context={**bcommon, "name": ens_name, "bucket": b, "inputs": text_in, "outputs": emb_out,
                     "steps": steps, "params": idp},
        ))
    return plans


def encoder_warmup_batches(spec: BuildSpec, max_batch: int) -> list[int]:
    """The batch sizes a Python-backend bucket encoder warms up with before ready. python-ort (ONNX
    Runtime on the CPU): batch 1 only. Measured on MiniLM's 256-token bucket (AMD EPYC, 2 cores),
    after one batch-1 run the first batch-32 run took what the next ones did (1705 / 1703 ms, 1925 /
    1900 ms), while a batch-32 warm-up cost each instance 3.5 CPU-seconds at load: the max-batch
    warm-ups were 12.6 of the 14.6 CPU-seconds of the default repository's start. OpenVINO's first
    batch-32 run took about 10% longer than the next (1344-1411 vs 1228-1247 ms), and PyTorch may
    run on a GPU, which allocates and tunes per shape: they keep batch 1 and the max batch, as the
    onnxruntime backend's encoders do."""
    if spec.target == "python-ort":
        return [1]
    return sorted({1, max_batch})


def _warmup(spec: BuildSpec, bucket: int, batch_sizes: list[int]) -> list[dict]:
    return [{"name": f"bucket_{bucket}_batch_{bs}", "batch_size": bs,
             "inputs": [_t(n, "TYPE_INT64", [bucket]) for n in spec.input_names]} for bs in batch_sizes]


def _encoder_plan(spec, b, name, outputs, encoder_output, onnx_paths, plan_paths, idp) -> ModelPlan:
    mb, batching = spec.bucket_max_batch(b), _batching(spec, spec.bucket_preferred(b))
    ctx = {"version": __version__, "max_batch_size": mb, "name": name, "bucket": b, "precision": spec.precision,
           "inputs": [_t(n, "TYPE_INT64", [encoder_dims(spec, b)]) for n in spec.input_names], "outputs": outputs}
    if spec.target in RUNTIMES:
        ctx.update(batching=batching, group=_group(spec.encoder_count, spec.gpu),
                   runtime=RUNTIME_LABELS[RUNTIMES[spec.target]],
                   params=sorted(runtime_params(spec, encoder_output, (b,))) + idp,
                   warmup=_warmup(spec, b, encoder_warmup_batches(spec, mb)))
        return ModelPlan(name, "encoder_python.pbtxt.j2", ctx, files=encoder_files(spec, onnx_paths[b]),
                         backend_code="encoder_python", kind="encoder")
    if spec.target == "onnxruntime":
        gpu = spec.gpu
        trt = ({"precision": "FP16", "workspace": 1 << 30, "cache_path": f"/tmp/embtrt_trt_cache/{name}"}
               if gpu and spec.ort_trt_fp16 else None)
        ctx.update(batching=batching, group=_group(spec.instances, gpu), device="GPU" if gpu else "CPU", graph_level=1,
                   trt_accelerator=trt, backend_params=[("intra_op_thread_count", str(spec.ort_threads)), ("inter_op_thread_count", "1")],
                   params=idp, warmup=_warmup(spec, b, sorted({1, mb})))
        return ModelPlan(name, "encoder_onnxruntime.pbtxt.j2", ctx, files={"1/model.onnx": onnx_paths[b]},
                         kind="encoder")
    # tensorrt
    sizes = graph_batch_sizes(spec, b)
    ctx.update(
        batching=_batching(spec, tuple(s for s in sizes if s > 1) or (1,)),
        group=_group(spec.instances, True, ["0"]),
        cc_model_filenames=[],
        graph_specs=[{"batch_size": bs, "inputs": [{"name": n, "dims": [b]} for n in spec.input_names]}
                     for bs in sizes],
        params=idp,
        warmup=_warmup(spec, b, sizes),
    )
    files = {"1/model.plan": plan_paths[b]} if b in plan_paths else {}
    return ModelPlan(name, "encoder_tensorrt.pbtxt.j2", ctx, files=files, kind="encoder")


def render_config(plan: ModelPlan, env: jinja2.Environment | None = None) -> str:
    env = env or environment()
    try:
        return env.get_template(plan.template).render(**plan.context)
    except jinja2.UndefinedError as exc:
        raise RepositoryError(f"template {plan.template} for {plan.name}: {exc}", "a bug in embtrt.render") from exc


def bundle_dir(spec: BuildSpec) -> str:
    """The bundle's folder, relative to the repository: inside the front-door model folder, where
    Triton ignores it (a top-level folder that is not a model fails the load)."""
    return f"{spec.name}/{DEPS_DIR}/{python_tag(spec.server_python)}"


def attach_deps(spec: BuildSpec, plans: list[ModelPlan]) -> None:
    """Each Python model's embtrt_deps.json: the modules it imports, and where the bundle is."""
    for plan in plans:
        if plan.backend_code:
            bundle = {"path": f"../../{bundle_dir(spec)}", "python": spec.server_python} if spec.bundle_deps else None
            plan.deps = {"requires": model_requires(plan.kind, spec.target, spec.router_mode == "local",
                                                    kind_of(spec.kind).packages),
                         "bundle": bundle}


def write_repository(plans: list[ModelPlan], repo: Path) -> list[Path]:
    """Write each model's config.pbtxt, its files, and the Python-backend code it runs."""
    env = environment()
    lib = python_backend_dir() / "embtrt_backend"
    written = []
    for plan in plans:
        if plan.backend_code:  # the check verifies these files exist in 1/
            needed = sorted(["model.py", *(r.split("/", 1)[1] for r in plan.files)] + (["embtrt_deps.json"] if plan.deps else []))
            plan.context["params"] = sorted(plan.context["params"] + [("embtrt.files", ",".join(needed))])
        d = repo / plan.name
        (d / "1").mkdir(parents=True, exist_ok=True)
        (d / "config.pbtxt").write_text(render_config(plan, env), encoding="utf-8")
        for rel, src in plan.files.items():
            link_or_copy(Path(src), d / rel)
        for rel, raw in plan.data.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(raw)
        if plan.deps is not None:
            (d / "1" / "embtrt_deps.json").write_text(json.dumps(plan.deps, indent=2) + "\n", encoding="utf-8")
        if plan.backend_code:
            shutil.copy2(python_backend_dir() / plan.backend_code / "model.py", d / "1" / "model.py")
            shutil.copytree(lib, d / "1" / "embtrt_backend",
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
        written.append(d)
    return written
