"""The embedder's build (`EmbedderBuild`, on the shared skeleton export.single.FrontDoorBuild): the folder
exported to ONNX (checked against PyTorch), its precision graph, one encoder per length bucket, the cosine
gate of the served vectors against SentenceTransformer.encode (`reference_vectors`), the front door and, for
its length-pools routing, each bucket's tokenizer, encoder, pooler and ensemble rendered (render.plan_repository),
the manifest and the check. `Kind.build` names `build_embedder_in`; export.pipeline.build runs it in the
build's work folder."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from embtrt_backend.kinds import EMBEDDER

from ...common.files import sha256_file
from ...common.log import Log
from ...errors import ParityError
from ...reference.modelinfo import inspect_model
from ...reference.parity import GateReport, evaluate
from ...reference.torch_ref import TorchReference, st_embed
from ...repository.manifest import Manifest, ModelNames
from ...export.encoders import identity, rebuild_command, refuse_on_gate, versions
from ...export.hf2onnx import export
from ...export.render import CALIBRATION_FILE, model_names, plan_repository
from ...export.single import FrontDoorBuild, precision_graph
from ...export.served import encoder_vectors
from ...export.spec import BuildSpec
from ...export.tokenizer import check_tokenizer, save_tokenizer


def reference_vectors(spec: BuildSpec, texts: list[str], log: Log) -> np.ndarray:
    """What SentenceTransformer.encode gives for the corpus with default options: with a default
    prompt, sentence-transformers itself (the prompt prepended; with include_prompt false its tokens
    left out of pooling); otherwise PyTorch float32 with the same pooling, batched by the token budget."""
    prompt = spec.default_prompt
    if prompt and inspect_model(spec.model_dir, spec.trust_remote_code).is_sentence_transformers:
        log(f"reference: SentenceTransformer.encode with the default prompt {spec.default_prompt_name!r}"
            + ("" if spec.include_prompt else " (its tokens left out of pooling)"))
        return st_embed(spec.model_dir, texts, max_seq_length=spec.max_seq_length, prompt=prompt,
                        trust_remote_code=spec.trust_remote_code)
    ref = TorchReference(spec.model_dir, spec.pooling, spec.normalize, spec.max_seq_length,
                         spec.input_names, spec.trust_remote_code)
    return ref.embed([prompt + t for t in texts] if prompt else texts, max_batch_tokens=spec.max_batch_tokens)


def torch_gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


class EmbedderBuild(FrontDoorBuild):
    """The skeleton's steps as an embedder takes them: its own export (the encoder's output, fused or hidden
    states), tokenizer, per-bucket precision graphs, cosine gate with the corpus' vectors kept as the int8 /
    uint8 calibration, its length pools' models and its manifest."""

    kind = EMBEDDER
    steps = 7
    art: Any = None   # the ONNX export (hf2onnx.export), where there is one
    cand: np.ndarray   # the served vectors of the corpus (the gate's candidate; the calibration)

    def reading_line(self) -> str:
        spec = self.spec
        return (f"reading {spec.model_dir} (target {spec.target}, pooling {spec.pooling}, "
                f"normalize {spec.normalize}, buckets {','.join(map(str, spec.buckets))})")

    def load(self) -> None:
        return None   # the reference runs in the gate (reference_vectors)

    @property
    def output_name(self) -> str:
        return "embedding" if self.spec.fused else "last_hidden_state"

    def export_step(self, texts: list[str]) -> None:
        spec, log = self.spec, self.log
        self.validation = None
        if spec.target == "python-torch":
            log(f"[2/{self.steps}] no ONNX export: the python-torch encoder runs the PyTorch model itself")
            return
        log(f"[2/{self.steps}] exporting to ONNX and validating against PyTorch")
        self.art = art = export(spec, self.work / "onnx", texts, log=log)
        self.onnx_path, self.validation = art.path, art.validation
        if art.input_names != tuple(spec.input_names):  # the graph's own inputs decide what is fed and served
            self.spec = spec.with_(input_names=art.input_names)

    def tokenizer_step(self, texts: list[str]) -> None:
        self.log(f"[3/{self.steps}] tokenizer")
        self.tok_json = self.work / "tokenizer.json"
        self.pad_id = save_tokenizer(self.spec, self.tok_json)
        check_tokenizer(self.spec, self.tok_json, self.pad_id, texts, self.log)

    def precision_step(self, texts: list[str]) -> None:
        spec, log = self.spec, self.log
        log(f"[4/{self.steps}] per-bucket encoders ({spec.target}, {spec.precision})")
        self.graph, self.prec, self.prec_record = (
            precision_graph(spec, self.art.path, self.work, texts, self.tok_json, self.pad_id, log) if self.art
            else (None, None, None))
        if spec.target == "python-torch":
            if spec.device == "cuda":
                log(f"PyTorch {spec.precision} on CUDA ({torch_gpu_name()}), weights cast, "
                    + (f"CUDA graphs per bucket and batch size: {spec.graph_shapes()}" if spec.cuda_graphs else "no CUDA graphs"))
            else:
                log(f"PyTorch {spec.precision}" + (" autocast (AMX/AVX-512 bf16 where the CPU has it)" if spec.precision == "bf16" else ""))

    @property
    def onnx_by_bucket(self) -> dict[int, Path | None]:
        """tensorrt: the gate judges the exact graph each plan is built from."""
        return dict(self.prec.gate_by_bucket) if self.prec else {b: self.graph for b in self.spec.buckets}

    def gate_step(self, texts: list[str]) -> GateReport:
        spec, log, prec = self.spec, self.log, self.prec
        log(f"[5/{self.steps}] parity gate: served path vs PyTorch reference on {len(texts)} real texts")
        ref = reference_vectors(spec, texts, log)
        try:
            exact = {"ort_optimize": "false"} if prec is not None and prec.gate_run == "simulated" else None
            cand, labels = encoder_vectors(spec, self.onnx_by_bucket, self.tok_json, self.pad_id, self.output_name, texts, exact)
        except Exception as exc:  # e.g. ONNX Runtime has no CPU kernel for a type of the precision graph
            if prec is None or type(exc).__module__.split(".")[0] != "onnxruntime":
                raise
            raise ParityError(f"the {spec.precision} ONNX cannot run in ONNX Runtime on this CPU, so the quality gate "
                              f"cannot judge it ({type(exc).__name__}: {str(exc)[:200]})",
                              "reduced precision ships only behind the gate: use fp16 or int8 for TensorRT") from None
        report: GateReport = evaluate(ref, cand, labels, spec.gate, texts)
        self.cand = cand
        np.save(self.work / CALIBRATION_FILE, cand)  # int8 / uint8 ranges: the served vectors of the corpus
        for line in report.lines:
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
                        "bf16": "bf16 loses too much for this model; use --precision fp32",
                        "fp16": "rebuild with --fp32-layers (LayerNorm, Softmax, reductions in fp32) or use --precision fp32"}.get(
                            spec.precision, "check --pooling and --normalize against the model card")
            refuse_on_gate(spec, False, report.failures, "encoders fail the quality gate", hint, log)
        return report

    def repository_identity(self) -> dict[str, str]:
        return identity(self.spec, self.msha)

    def plans(self) -> list:
        spec = self.spec
        self.log(f"[6/{self.steps}] rendering {spec.name} and its per-bucket models")
        return plan_repository(spec, onnx_paths=self.onnx_by_bucket, encoder_output=self.output_name,
                               tokenizer_json=self.tok_json, pad_id=self.pad_id, identity=self.ident,
                               calibration=self.work / CALIBRATION_FILE)

    def manifest(self, plans: list, report: GateReport, texts: list[str]) -> Manifest:
        spec, prec, cand, ident, msha, art = self.spec, self.prec, self.cand, self.ident, self.msha, self.art
        encoder_onnx, pad_id, output_name, bundle, graph_record = self.graph, self.pad_id, self.output_name, self.bundle, self.prec_record
        names = model_names(spec)
        return Manifest(
            name=spec.name, identity=ident,
            models=ModelNames(spec.name, tuple(names["ensemble"].values()), tuple(names["encoder"].values())),
            pooling=spec.pooling, normalize=spec.normalize, dim=spec.hidden_size, buckets=spec.buckets,
            max_seq_length=spec.max_seq_length, overflow=spec.overflow, overflow_stride=spec.overflow_stride,
            precision=spec.precision, target=spec.target, backend_profile=ident["embtrt.backend_profile"],
            pooler=spec.pooler, input_names=tuple(spec.input_names), encoder_output=output_name, pad_id=pad_id,
            max_batch_size=spec.max_batch_size, max_batch_tokens=spec.max_batch_tokens,
            bucket_max_batch={b: spec.bucket_max_batch(b) for b in spec.buckets},
            router_encoder=spec.router_mode, server_python=spec.server_python, bundle=bundle,
            prompts=spec.prompt_map, default_prompt_name=spec.default_prompt_name, include_prompt=spec.include_prompt,
            dimensions=spec.dimensions,
            quant_ranges=[cand.min(axis=0).tolist(), cand.max(axis=0).tolist()],
            extra={
                "calibration": {"file": f"{spec.name}/1/{CALIBRATION_FILE}", "texts": len(texts),
                                "what": "the served vectors of the gate's corpus, default options; int8 / uint8 ranges "
                                        "at any width come from these (truncated and renormalized as the request asks)"},
                "source": {"path": str(spec.model_dir), "sha256": msha},
                "spec": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(spec).items()},
                "versions": versions(),
                "onnx": ({"sha256": sha256_file(art.path if prec else encoder_onnx), "export_validation": art.validation}
                         if art is not None and encoder_onnx is not None else None),
                "parity": {**report.as_dict(), "graph": (prec.gate_run if prec is not None else "exact"),
                           "allowed_mismatch": (not report.passed) and spec.allow_mismatch},
                "precision_onnx": prec.manifest() if prec is not None else graph_record,
                "tensorrt": {},
                "pending": [],
                "rebuild": rebuild_command(spec),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        )

    def parity_lines(self, report: GateReport) -> list[str]:
        return list(report.lines)


build_embedder_in = EmbedderBuild.build_in
