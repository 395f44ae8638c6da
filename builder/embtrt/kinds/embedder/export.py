"""The embedder's build: the folder exported to ONNX (checked against PyTorch), its precision graph,
one encoder per length bucket, the cosine gate of the served vectors against SentenceTransformer.encode
(`reference_vectors`), the ensembles, front door and routing rendered, the manifest and the check.
`Kind.build` names `build_embedder_in`; export.pipeline.build runs it in the build's work folder."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ...common.files import sha256_file
from ...common.log import Log
from ...errors import ParityError
from ...reference.modelinfo import inspect_model, model_hash
from ...reference.parity import GateReport, evaluate
from ...reference.torch_ref import TorchReference, st_embed
from ...repository.manifest import Manifest, ModelNames
from ...export.encoders import identity, rebuild_command, refuse_on_gate, require_openvino, versions
from ...export.hf2onnx import export
from ...export.result import BuildResult
from ...export.render import CALIBRATION_FILE, model_names, plan_repository
from ...export.single import finish, precision_graph, write_front_door
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


def build_embedder_in(spec: BuildSpec, tmp: Path, texts: list[str], log: Log) -> BuildResult:
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
    encoder_onnx, prec, graph_record = (precision_graph(spec, art.path, work, texts, tok_json, pad_id, log) if art
                                        else (None, None, None))
    if spec.target == "python-torch":
        if spec.device == "cuda":
            log(f"PyTorch {spec.precision} on CUDA ({torch_gpu_name()}), weights cast, "
                + (f"CUDA graphs per bucket and batch size: {spec.graph_shapes()}" if spec.cuda_graphs else "no CUDA graphs"))
        else:
            log(f"PyTorch {spec.precision}" + (" autocast (AMX/AVX-512 bf16 where the CPU has it)" if spec.precision == "bf16" else ""))
    # tensorrt: the gate judges the exact graph each plan is built from
    onnx_by_bucket: dict[int, Path | None] = dict(prec.gate_by_bucket) if prec else {b: encoder_onnx for b in spec.buckets}

    log(f"[5/{steps}] parity gate: served path vs PyTorch reference on {len(texts)} real texts")
    ref = reference_vectors(spec, texts, log)
    try:
        exact = {"ort_optimize": "false"} if prec is not None and prec.gate_run == "simulated" else None
        cand, labels = encoder_vectors(spec, onnx_by_bucket, tok_json, pad_id, output_name, texts, exact)
    except Exception as exc:  # e.g. ONNX Runtime has no CPU kernel for a type of the precision graph
        if prec is None or type(exc).__module__.split(".")[0] != "onnxruntime":
            raise
        raise ParityError(f"the {spec.precision} ONNX cannot run in ONNX Runtime on this CPU, so the quality gate "
                          f"cannot judge it ({type(exc).__name__}: {str(exc)[:200]})",
                          "reduced precision ships only behind the gate: use fp16 or int8 for TensorRT") from None
    report: GateReport = evaluate(ref, cand, labels, spec.gate, texts)
    np.save(work / CALIBRATION_FILE, cand)  # int8 / uint8 ranges: the served vectors of the corpus
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

    log(f"[6/{steps}] rendering {spec.name} and its per-bucket models")
    ident = identity(spec, msha)
    plans = plan_repository(spec, onnx_paths=onnx_by_bucket, encoder_output=output_name,
                            tokenizer_json=tok_json, pad_id=pad_id, identity=ident, calibration=work / CALIBRATION_FILE)
    bundle = write_front_door(spec, plans, repo, log)
    if bundle is None:
        log("no Python packages bundled (--no-bundle-deps): the server's Python must have "
            + ", ".join(sorted({m for p in plans if p.deps for m in p.deps["requires"]})))
    names = model_names(spec)
    manifest = Manifest(
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
    result = finish(repo, manifest, f"[7/{steps}]", log, spec, prec, texts)
    result.parity_lines = list(report.lines)
    return result
