"""What the reranker and sparse builds share: a repository of one front door that runs its own
encoder (encoder_mode local) or calls one encoder model per bucket over BLS (the onnxruntime
target, or --router-encoder bls) — written with its bundle, then the manifest, then checked
before the build returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import __version__
from ..common.log import Log
from ..errors import RepositoryError
from ..repository.check import check_repository
from ..repository.manifest import Manifest, write_manifest
from ..common.files import sha256_file
from .render import (ModelPlan, _encoder_plan, _t, attach_deps, bundle_dir, encoder_dims, encoder_files, model_names,
                     torch_dir, write_repository)
from .result import BuildResult
from .spec import BuildSpec


def bls_params(spec: BuildSpec) -> dict[str, str]:
    """The front door's encoder parameters: local, or the bucket encoder models it calls."""
    if spec.router_mode == "local":
        return {"encoder_mode": "local"}
    return {"encoder_mode": "bls", "encoder_models": ",".join(model_names(spec)["encoder"][b] for b in spec.buckets)}


def export_step(spec: BuildSpec, step: str, what: str, export, log: Log) -> dict | None:
    """A kind's export step: `export()` (the graph, validated against sentence-transformers) -> its
    validation; python-torch exports nothing (its encoder runs the PyTorch model) -> None."""
    if spec.target == "python-torch":
        log(f"{step} no ONNX export: the python-torch encoder runs the PyTorch model itself"
            + (" (bf16 autocast)" if spec.precision == "bf16" else ""))
        return None
    log(f"{step} exporting {what}")
    return export()


class GateEncoder:
    """What the gate runs for each bucket's chunk, `(bucket, feeds) -> output`: one encoder per
    distinct graph (a TensorRT int8 / fp8 build has one per bucket), each made as the front door or a
    bucket encoder makes it from the same parameters (the graph in ONNX Runtime / OpenVINO, or
    python-torch's PyTorch model)."""

    def __init__(self, spec: BuildSpec, params: dict[str, str], graphs: dict[int, Path | None], optimize: bool = True):
        from embtrt_backend.encoder import make_encoder

        p = params if optimize else {**params, "ort_optimize": "false"}   # a simulation's casts must stay
        made: dict[Path | None, Any] = {}   # an embtrt_backend encoder: .run(feeds)
        for g in dict.fromkeys(graphs.values()):
            made[g] = make_encoder(p, None if g is None else str(g), str(torch_dir(spec)), spec.trust_remote_code)
        self.by_bucket = {b: made[g] for b, g in graphs.items()}
        self.single = next(iter(made.values())) if len(made) == 1 else None

    def __call__(self, bucket: int, feeds: dict):
        return self.by_bucket[bucket].run(feeds)

    def run(self, feeds: dict):
        """One graph's encoder (every build but TensorRT int8 / fp8 has one), for timing runs."""
        assert self.single is not None, "several graphs: run one bucket's"
        return self.single.run(feeds)


def export_head(head, args: tuple, path: Path, input_names, output: str):
    """A kind's head (a torch module over the model's inputs) to ONNX as every kind exports it: rows
    and length dynamic, opset 17, the TorchScript exporter; checked by onnx -> an ONNX Runtime CPU
    session on it, for the kind's validation against its reference."""
    import warnings

    import onnx
    import onnxruntime as ort
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(head, args, str(path), input_names=list(input_names), output_names=[output],
                          dynamic_axes={**{n: {0: "rows", 1: "length"} for n in input_names}, output: {0: "rows"}},
                          opset_version=17, do_constant_folding=True, dynamo=False)
    onnx.checker.check_model(str(path), full_check=False)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def kind_encoder(spec: BuildSpec, params: dict[str, str], graph: Path | None, prec=None) -> GateEncoder:
    """The gate's encoder: the one graph, or (tensorrt) each bucket's precision-ONNX gate graph, run
    unoptimized where it is a simulation (bf16)."""
    if prec is None:
        return GateEncoder(spec, params, {b: graph for b in spec.buckets})
    return GateEncoder(spec, params, dict(prec.gate_by_bucket), optimize=prec.gate_run == "exact")


def local_files(spec: BuildSpec, graph: Path | None) -> dict[str, Path]:
    """What a front door that runs its own encoder carries: the graph (1/model.onnx), or the model
    folder's files python-torch loads (1/hf/); nothing over BLS."""
    return encoder_files(spec, graph) if spec.router_mode == "local" else {}


def onnx_record(onnx_path: Path, graph: Path | None, validation: dict | None, prec=None) -> dict | None:
    """The manifest's `onnx`: the export, its validation and the graph the gate judged (tensorrt: per
    bucket where they differ; precision_onnx has each plan's source); None: python-torch runs no ONNX."""
    if graph is None:
        return None
    served: str | dict[str, str] = sha256_file(graph)
    if prec is not None and len(set(prec.gate_by_bucket.values())) > 1:
        served = {str(b): sha256_file(g) for b, g in prec.gate_by_bucket.items()}
    return {"sha256": sha256_file(onnx_path), "export_validation": validation, "served_sha256": served}


def bucket_encoders(spec: BuildSpec, onnx_path: Path, output: str, width: int, ident: dict[str, str]) -> list[ModelPlan]:
    """encoder_mode bls: one encoder model per bucket over the one ONNX graph (the onnxruntime
    backend, or the Python backend's encoder for --router-encoder bls), each row's output [width],
    its max batch the bucket's token budget; none in local mode."""
    if spec.router_mode == "local":
        return []
    names = model_names(spec)["encoder"]
    plans = []
    for b in spec.buckets:
        dims = [encoder_dims(spec, b)]
        common = {"version": __version__, "max_batch_size": spec.bucket_max_batch(b)}
        plans.append(_encoder_plan(spec, b, names[b], [_t(n, "TYPE_INT64", dims) for n in spec.input_names],
                                   [_t(output, "TYPE_FP32", [width])], output, {b: onnx_path}, {}, common,
                                   sorted(ident.items())))
    return plans


def write_front_door(spec: BuildSpec, plans: list[ModelPlan], repo: Path, log: Log) -> dict | None:
    """The front door's folder (config, files, Python code, deps), any bucket encoders, and the
    bundle -> the bundle record."""
    attach_deps(spec, plans)
    write_repository(plans, repo)
    if not spec.bundle_deps:
        return None
    from .bundle import make_bundle

    bundle = make_bundle(spec.target, spec.server_python, repo / bundle_dir(spec), log)
    bundle["path"] = bundle_dir(spec)
    return bundle


def precision_graph(spec: BuildSpec, onnx_path: Path, work: Path, texts: list[str], tok_json: Path, pad_id: int,
                    log: Log):
    """The graph the gate judges and the front door or the bucket encoders serve: the exported
    ONNX; int8 (python-ort, onnxruntime) or fp16 (onnxruntime): encoders.ort_graph, as for embedders;
    for the tensorrt target the precision ONNX its plans are built from (export.precision: one graph
    for every bucket at fp32 / fp16 / bf16, one per bucket for int8 / fp8; the gate runs each bucket's
    gate graph, kind_encoder) -> (path (tensorrt: the first bucket's gate graph), the PrecisionArtifact
    or None, the manifest's precision_onnx record of an ONNX Runtime target's graph or None: a tensorrt
    build's is recorded by `finish` with its plans); python-torch runs no graph -> (None, None, None)."""
    if spec.target == "python-torch":
        return None, None, None
    if spec.target != "tensorrt":
        from .encoders import ort_graph

        graph, record = ort_graph(spec, onnx_path, work, texts, tok_json, pad_id, log)
        return graph, None, record
    from .precision import make_precision_onnx

    prec = make_precision_onnx(spec, onnx_path, work / "precision", texts, tok_json, pad_id, log)
    return prec.gate_by_bucket[spec.buckets[0]], prec, None


def finish(repo: Path, manifest: Manifest, step: str, log: Log, spec: BuildSpec | None = None, prec=None,
           texts: list[str] | None = None) -> BuildResult:
    """Write the manifest; for the tensorrt target write the engine recipes and build the plans
    where TensorRT is (else they are pending: `embtrt engines` on the GPU host); check the
    repository (a failure is embtrt's bug); return the result."""
    write_manifest(repo, manifest)
    pending: list[str] = []
    if prec is not None:   # engines read the manifest (tokenizer, pad id, kind)
        from .onnx2trt import recipes_and_plans

        assert spec is not None and texts is not None
        pending, state = recipes_and_plans(spec, prec, repo, texts, log)
        manifest = manifest.with_extra(tensorrt=state, pending=pending, precision_onnx=prec.manifest())
        write_manifest(repo, manifest)
    log(f"{step} checking the repository")
    rep = check_repository(repo, allow_pending_plans=manifest.target == "tensorrt")
    for line in rep.lines():
        log(line)
    if not rep.passed:
        raise RepositoryError("the generated repository failed its check: " + "; ".join(rep.failures()),
                              "this is a bug in embtrt; please report it with the lines above")
    return BuildResult(repo, manifest.to_dict(), rep.lines(), [], pending)
