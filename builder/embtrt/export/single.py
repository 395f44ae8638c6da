"""The build of a kind whose front door runs every bucket itself (the reranker, the sparse encoder):
one skeleton (`FrontDoorBuild`) and what it is made of: a repository of one front door that runs
its own encoder (encoder_mode local) or calls one encoder model per bucket over BLS (the
onnxruntime target, or --router-encoder bls) — written with its bundle, then the manifest, then
checked before the build returns. Each kind writes its parts (embtrt.kinds.reranker.export, embtrt.kinds.sparse.export)."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from embtrt_backend.kinds import Kind, kind_of

from .. import __version__
from ..common.files import sha256_file
from ..common.log import Log
from ..errors import RepositoryError, SpecError
from ..reference.modelinfo import model_hash
from ..repository.check import check_repository
from ..repository.manifest import Manifest, ModelNames, write_manifest
from .encoders import identity, rebuild_command, refuse_on_gate, require_openvino, versions
from .render import (ModelPlan, _batching, _encoder_plan, _group, _t, attach_deps, bundle_dir, encoder_files,
                     front_params, front_warmup, model_names, torch_dir, warmup_data, write_repository)
from .result import BuildResult
from .spec import BuildSpec


class GateEncoder:
    """What the gate runs for each bucket's chunk, `(bucket, feeds) -> output`: one encoder per
    distinct graph (a TensorRT int8 / fp8 build has one per bucket), each made as the front door or a
    bucket encoder makes it from the same parameters (the graph in ONNX Runtime / OpenVINO, or
    python-torch's PyTorch model)."""

    def __init__(self, spec: BuildSpec, params: dict[str, str], graphs: dict[int, Path | None], optimize: bool = True):
        from embtrt_backend.encoder import make_encoder

        p = params if optimize else {**params, "ort_optimize": "false"}   # a simulation's casts must stay
        made: dict[Path | None, Any] = {   # an embtrt_backend encoder: .run(feeds)
            g: make_encoder(p, None if g is None else str(g), str(torch_dir(spec)), spec.trust_remote_code)
            for g in dict.fromkeys(graphs.values())}
        self.by_bucket = {b: made[g] for b, g in graphs.items()}

    def __call__(self, bucket: int, feeds: dict):
        return self.by_bucket[bucket].run(feeds)


def export_head(head, args: tuple, path: Path, input_names, output: str, length: bool = True):
    """A kind's head (a torch module over the model's inputs) to ONNX as every kind exports it: rows
    and length dynamic (`length` False: rows only, a fixed-size input such as an image tower's pixels),
    opset 17, the TorchScript exporter; checked by onnx -> an ONNX Runtime CPU session on it, for the
    kind's validation against its reference."""
    import warnings

    import onnx
    import onnxruntime as ort
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(head, args, str(path), input_names=list(input_names), output_names=[output],
                          dynamic_axes={**{n: {0: "rows", **({1: "length"} if length else {})} for n in input_names},
                                        output: {0: "rows"}},
                          opset_version=17, do_constant_folding=True, dynamo=False)
    onnx.checker.check_model(str(path), full_check=False)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def write_front_door(spec: BuildSpec, plans: list[ModelPlan], repo: Path, log: Log) -> dict | None:
    """The front door's folder (config, files, Python code, deps), any bucket encoders, and the
    bundle -> the bundle record."""
    attach_deps(spec, plans)
    write_repository(plans, repo)
    if not spec.bundle_deps:
        return None
    from .bundle import make_bundle

    bundle = make_bundle(spec.target, spec.server_python, repo / bundle_dir(spec), log, kind_of(spec.kind).packages)
    bundle["path"] = bundle_dir(spec)
    return bundle


def precision_graph(spec: BuildSpec, onnx_path: Path, work: Path, texts: list[str], tok_json: Path, pad_id: int,
                    log: Log):
    """The graph the gate judges and the front door or the bucket encoders serve: the exported
    ONNX; int8 (python-ort, onnxruntime) or fp16 (onnxruntime): encoders.ort_graph, as for embedders;
    for the tensorrt target the precision ONNX its plans are built from (export.precision: one graph
    for every bucket at fp32 / fp16 / bf16, one per bucket for int8 / fp8; the gate runs each bucket's
    gate graph, GateEncoder) -> (path (tensorrt: the first bucket's gate graph), the PrecisionArtifact
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


class FrontDoorBuild:
    """The build skeleton of a kind whose front door runs every bucket itself (the reranker, the
    sparse encoder): read -> export the head -> tokenizer -> the precision graph -> the gate on the
    front door's own core -> render -> manifest -> check. A kind writes its parts (the methods that
    raise here, and the class attributes); `build_in` is what its `Kind.build` names."""

    kind: Kind
    exporting = ""       # step 2's "exporting ..."
    tokenizer_noun = "tokenizer"
    changes = ""         # what reduced precision changes beyond the gate: "scores", "weights"
    targets_why = ""     # why a kind that builds for some targets only (Kind.targets) builds for no other
    reference = ""       # the manifest's parity reference

    def __init__(self, spec: BuildSpec, log: Log) -> None:
        self.spec, self.log = spec, log

    @classmethod
    def build_in(cls, spec: BuildSpec, tmp: Path, texts: list[str], log: Log) -> BuildResult:
        return cls(spec, log).build(tmp, texts)

    # the kind's parts (each kind writes them)
    def reading(self) -> str: raise NotImplementedError   # step 1: what the folder is read as
    def load(self) -> Any: raise NotImplementedError   # its sentence-transformers reference
    def export(self, ref: Any, path: Path, texts: list[str]) -> dict: raise NotImplementedError   # the head at `path`, validated -> record
    def hf_tokenizer(self, ref: Any) -> Any: raise NotImplementedError
    # the serving tokenizer equals the reference's on the texts (and what it serves beside)
    def check_tokenizer(self, hf_tok, tok_json: Path, pad_id: int, work: Path, texts: list[str]) -> None: raise NotImplementedError
    def gating(self, texts: list[str]) -> str: raise NotImplementedError   # step 4: what the gate compares
    # the kind's gate on the front door's own core over `encoder` -> its verdict as a dict
    def gate(self, ref: Any, params: dict[str, str], encoder: GateEncoder, work: Path, texts: list[str]) -> dict: raise NotImplementedError
    def outputs(self) -> list[dict]: raise NotImplementedError   # the front door's outputs
    def manifest_fields(self) -> dict: raise NotImplementedError   # its Manifest fields beyond the shared ones
    width = property(lambda self: self.spec.hidden_size)   # each row's encoder output width

    def encoder_dims(self) -> list[int]:
        """A row's encoder output dims in a bucket encoder's config ([width]; per position: [-1, width])."""
        return [self.width]

    def params(self, pad_id: int) -> dict[str, str]:
        return front_params(self.spec, pad_id, self.kind.encoder_output)

    def input_tensors(self) -> list[dict]:
        """The front door's inputs: the kind's text inputs (a kind may add optional ones: `optional` true); a kind whose
        input takes images: its text input and its image input, both optional (a request carries one of them)."""
        if self.kind.image_input:
            return [dict(_t(name, "TYPE_STRING", [1]), optional=True) for name in (*self.kind.inputs, self.kind.image_input)]
        return [_t(name, "TYPE_STRING", [1]) for name in self.kind.inputs]

    def files(self, work: Path) -> dict[str, Path]:
        """Files beside the tokenizer and the graph in the front door's folder."""
        return {}

    def warmup_samples(self) -> tuple[list[dict], dict[str, bytes]]:
        """The front door's warm-up samples beside the text one (local mode), and their files under warmup/: where the
        kind takes images, an 8 x 8 PNG through the image path (decode, preprocess, the model) before it is ready."""
        if not self.kind.image_input:
            return [], {}
        from embtrt_backend.images import PROBE_PNG

        name = self.kind.image_input
        sample = {"name": "sample_image", "batch_size": 1, "inputs": [dict(_t(name, "TYPE_STRING", [1]), file="sample_image")]}
        return [sample], {"warmup/sample_image": len(PROBE_PNG).to_bytes(4, "little") + PROBE_PNG}

    def extra_plans(self, ident: dict[str, str], work: Path) -> list[ModelPlan]:
        """Models beside the front door and its bucket encoders (a second tower's encoder model over BLS)."""
        return []

    # the skeleton's steps: a kind of another routing or head writes its own (kinds.embedder.export.EmbedderBuild)
    steps = 6
    # what the steps make, in order (build)
    work: Path
    repo: Path
    msha: str
    ref: Any
    onnx_path: Path
    validation: dict | None
    tok_json: Path
    pad_id: int
    graph: Path | None
    prec: Any
    prec_record: dict | None
    ident: dict[str, str]
    bundle: dict | None

    def build(self, tmp: Path, texts: list[str]) -> BuildResult:
        spec, log, kind = self.spec, self.log, self.kind
        self.work, self.repo = work, repo = tmp / "work", tmp / "repo"
        repo.mkdir(parents=True)
        work.mkdir(parents=True)
        if kind.targets and spec.target not in kind.targets:
            raise SpecError(f"target {spec.target}: {kind.noun}s build for {' or '.join(kind.targets)} only ({self.targets_why})",
                            f"build with --target {kind.targets[0]}")
        log(f"[1/{self.steps}] {self.reading_line()}")
        if spec.target == "python-openvino":
            require_openvino(spec.precision, log)
        self.msha = model_hash(spec.model_dir)
        self.ref = self.load()
        self.export_step(texts)
        self.tokenizer_step(texts)
        self.precision_step(texts)
        report = self.gate_step(texts)
        self.ident = self.repository_identity()
        plans = self.plans()
        self.bundle = write_front_door(self.spec, plans, repo, log)
        if self.bundle is None:
            log("no Python packages bundled (--no-bundle-deps): the server's Python must have "
                + ", ".join(sorted({m for p in plans if p.deps for m in p.deps["requires"]})))
        manifest = self.manifest(plans, report, texts)
        result = finish(repo, manifest, f"[{self.steps}/{self.steps}]", log, self.spec, self.prec, texts)
        result.parity_lines = self.parity_lines(report)
        return result

    def parity_lines(self, report: Any) -> list[str]:
        """The gate's lines the build result carries (`embtrt build` prints them again at the end)."""
        return []

    def reading_line(self) -> str:
        return f"reading {self.spec.model_dir} as {self.reading()}"

    def export_step(self, texts: list[str]) -> None:
        """Step 2: the head to ONNX (`self.onnx_path`), validated against the reference (`self.validation`);
        python-torch exports nothing (its encoder runs the PyTorch model)."""
        spec, log = self.spec, self.log
        self.onnx_path = self.work / "onnx" / "model.onnx"
        self.validation = None
        if spec.target == "python-torch":
            log(f"[2/{self.steps}] no ONNX export: the python-torch encoder runs the PyTorch model itself"
                + (" (bf16 autocast)" if spec.precision == "bf16" else ""))
        else:
            log(f"[2/{self.steps}] exporting {self.exporting}")
            self.validation = self.export(self.ref, self.onnx_path, texts)   # the graph, validated against sentence-transformers

    def tokenizer_step(self, texts: list[str]) -> None:
        """Step 3: the serving tokenizer (`self.tok_json`, `self.pad_id`), checked against the reference's."""
        self.log(f"[3/{self.steps}] {self.tokenizer_noun}")
        self.tok_json = tok_json = self.work / "tokenizer.json"
        hf_tok = self.hf_tokenizer(self.ref)
        hf_tok.backend_tokenizer.save(str(tok_json))
        self.pad_id = int(hf_tok.pad_token_id if hf_tok.pad_token_id is not None else 0)
        self.check_tokenizer(hf_tok, tok_json, self.pad_id, self.work, texts)

    def precision_step(self, texts: list[str]) -> None:
        """The graph the gate judges and the model serves (`self.graph`; tensorrt: `self.prec`, the precision ONNX;
        `self.prec_record`, an ONNX Runtime target's precision graph): precision_graph."""
        self.graph, self.prec, self.prec_record = precision_graph(self.spec, self.onnx_path, self.work, texts, self.tok_json,
                                                                  self.pad_id, self.log)

    def gate_step(self, texts: list[str]) -> Any:
        """Step 4: the kind's gate on the front door's own core -> its verdict (a build it fails is refused)."""
        spec, log, kind, prec = self.spec, self.log, self.kind, self.prec
        log(f"[4/{self.steps}] the gate: {self.gating(texts)}"
            + (f" ({spec.precision} ONNX, padded to each bucket as its TensorRT plan runs)" if prec is not None else ""))
        params = self.params(self.pad_id)
        # the one graph, or (tensorrt) each bucket's gate graph, run unoptimized where it is a simulation (bf16)
        encoder = GateEncoder(spec, params, dict(prec.gate_by_bucket) if prec else {b: self.graph for b in spec.buckets},
                              optimize=prec is None or prec.gate_run == "exact")
        report = self.gate(self.ref, params, encoder, self.work, texts)
        refuse_on_gate(spec, report["passed"], report["failures"], f"{kind.noun} fails the gate",
                       f"{spec.precision} changes the {self.changes} beyond the reduced-precision gate for this model; "
                       "use --precision fp32" if spec.precision != "fp32" else "report the model architecture", log)
        return report

    def repository_identity(self) -> dict[str, str]:
        """The repository's identity (its config parameters and manifest)."""
        return {**identity(self.spec, self.msha), "embtrt.kind": self.kind.name}

    def plans(self) -> list[ModelPlan]:
        """Step 5: the front door (and, over BLS, one encoder model per bucket, and the kind's extra models)."""
        spec, kind, ident, graph = self.spec, self.kind, self.ident, self.graph
        self.log(f"[5/{self.steps}] rendering the front door {spec.name}")
        params = self.params(self.pad_id)
        inputs = self.input_tensors()
        more_warmup, more_data = self.warmup_samples() if spec.router_mode == "local" else ([], {})
        plan = ModelPlan(
            name=spec.name, template="router.pbtxt.j2", kind="front door",
            context={"version": __version__, "max_batch_size": spec.max_batch_size, "name": spec.name,
                     "inputs": inputs, "outputs": self.outputs(),
                     "batching": _batching(spec), "group": _group(spec.front_instances, spec.front_on_gpu),
                     # a parameter the identity holds is written once, with the identity
                     "params": sorted((k, v) for k, v in params.items() if k not in ident) + sorted(ident.items()),
                     "warmup": front_warmup(spec, [t for t in inputs if t["name"] in kind.inputs]) + more_warmup},
            # local: the graph (1/model.onnx) or python-torch's model files (1/hf/); nothing over BLS
            files={"1/tokenizer.json": self.tok_json, **(encoder_files(spec, graph) if spec.router_mode == "local" else {}),
                   **self.files(self.work)},
            backend_code=kind.front_door, data={**warmup_data(spec), **more_data})
        names = model_names(spec)["encoder"]   # bls: one encoder model per bucket over the one graph, its rows [width]
        encoders = [] if spec.router_mode == "local" else [
            _encoder_plan(spec, b, names[b], [_t(kind.encoder_output, "TYPE_FP32", self.encoder_dims())], kind.encoder_output,
                          {b: graph}, {}, sorted(ident.items())) for b in spec.buckets]
        return [plan, *encoders, *self.extra_plans(ident, self.work)]

    def manifest(self, plans: list[ModelPlan], report: Any, texts: list[str]) -> Manifest:
        """The repository's manifest: the shared fields, the kind's (`manifest_fields`) and the build's record."""
        spec, kind, ident, graph, prec = self.spec, self.kind, self.ident, self.graph, self.prec
        # the graph the gate judged (tensorrt: per bucket where they differ; precision_onnx has each plan's source)
        served: str | dict[str, str] | None = None if graph is None else sha256_file(graph)
        if prec is not None and len(set(prec.gate_by_bucket.values())) > 1:
            served = {str(b): sha256_file(g) for b, g in prec.gate_by_bucket.items()}
        return Manifest(
            name=spec.name, identity=ident, models=ModelNames(spec.name, (), tuple(e.name for e in plans[1:])),
            normalize=False, dim=self.width, buckets=spec.buckets, max_seq_length=spec.max_seq_length,
            overflow="truncate", overflow_stride=0, precision=spec.precision, target=spec.target,
            backend_profile=ident["embtrt.backend_profile"], input_names=tuple(spec.input_names),
            encoder_output=kind.encoder_output, pad_id=self.pad_id, max_batch_size=spec.max_batch_size,
            max_batch_tokens=spec.max_batch_tokens, bucket_max_batch={b: spec.bucket_max_batch(b) for b in spec.buckets},
            router_encoder=spec.router_mode, server_python=spec.server_python, bundle=self.bundle, kind=kind.name,
            activation=spec.activation, prompts=spec.prompt_map, default_prompt_name=spec.default_prompt_name,
            **self.manifest_fields(),
            extra={"source": {"path": str(spec.model_dir), "sha256": self.msha},
                   "spec": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(spec).items()},
                   "versions": versions(),
                   "onnx": None if graph is None else {"sha256": sha256_file(self.onnx_path),
                                                       "export_validation": self.validation, "served_sha256": served},
                   "precision_onnx": self.prec_record,
                   "parity": {**report, "reference": self.reference,
                              "allowed_mismatch": (not report["passed"]) and spec.allow_mismatch},
                   "pending": [], "rebuild": rebuild_command(spec) + f" --kind {kind.name}",
                   "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
