"""`embtrt build` of a sparse encoder (a SPLADE SparseEncoder folder): MLM head + SPLADE pooling ->
ONNX (one [rows, vocab] weight vector per text) -> the front door over the request core -> the
gate against SparseEncoder.encode_query / encode_document -> manifest -> check.

The served path is the front door's request core (embtrt_backend.core, fused: the graph pools)
and its sparsifying step (embtrt_backend.sparse), so the gate judges exactly what is served.
docs/sparse.md has the contract.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import SPARSE

from .. import __version__
from ..common.log import Log
from ..errors import ParityError
from ..reference.modelinfo import model_hash
from ..reference.sparse_gate import TOLERANCE, judge
from ..reference.sparse_ref import load_sparse_encoder, se_encode
from ..repository.budget import bucket_batch
from ..repository.manifest import Manifest, ModelNames
from .encoders import identity, rebuild_command, refuse_on_gate, require_openvino, versions
from .render import (LONG_ROW_TOKENS, MAX_TEXT_BYTES, ModelPlan, _batching, _group, _t, front_warmup,
                     runtime_params, warmup_data)
from .result import BuildResult
from .single import (bls_params, bucket_encoders, export_head, export_step, finish, kind_encoder, local_files, onnx_record, precision_graph,
                     write_front_door)
from .spec import BuildSpec



def export_splade(se, spec: BuildSpec, path: Path, texts: list[str], log: Log) -> dict:
    """MLM logits -> log(1 + relu(logits * mask)) (twice for log1p_relu) -> max or sum over the
    sequence (-> with --active-dims-in-graph each row's K largest kept): output `sparse` [rows,
    vocab]; validated against SparseEncoder on real texts."""
    import torch
    from transformers import AutoModelForMaskedLM

    from embtrt_backend.torch_encoder import splade_weights

    mlm = AutoModelForMaskedLM.from_pretrained(str(doc_dir(spec)), dtype=torch.float32, attn_implementation="eager",
                                               trust_remote_code=spec.trust_remote_code).eval()
    names, pooling, double = spec.input_names, spec.splade_pooling, spec.activation == "log1p_relu"
    top = spec.sparse_max_active_dims if spec.active_dims_in_graph else 0

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = mlm

        def forward(self, *args):
            kw = dict(zip(names, args))   # --active-dims-in-graph: `top` > 0, TopK + Scatter in the graph
            return splade_weights(torch, self.m(**kw).logits, kw["attention_mask"], pooling, double, top)

    tok = doc_module(se).tokenizer
    sample = tok(texts[:2], padding=True, truncation=True, max_length=spec.max_seq_length, return_tensors="pt")
    sess = export_head(Head(), tuple(sample[n] for n in names), path, names, SPARSE.encoder_output)
    batch = texts[5:13]
    enc = tok(batch, padding=True, truncation=True, max_length=spec.max_seq_length, return_tensors="np")
    got = sess.run([SPARSE.encoder_output], {n: enc[n].astype(np.int64) for n in names})[0]
    from embtrt_backend.sparse import keep_largest

    got = keep_largest(got, spec.sparse_max_active_dims or None)   # as the front door keeps them
    worst = float(np.abs(got - se_encode(se, batch)).max())
    if worst > TOLERANCE:
        raise ParityError(f"the exported ONNX SPLADE head differs from SparseEncoder by {worst:.2e}",
                          "report the model architecture")
    log(f"[ok] ONNX SPLADE head equals SparseEncoder on real texts (max |weight difference| {worst:.1e})")
    return {"max_abs_diff": worst, "opset": 17}


def front_params(spec: BuildSpec, pad_id: int) -> dict[str, str]:
    import json

    p = dict(runtime_params(spec, SPARSE.encoder_output))
    p.update({"max_seq_length": str(spec.max_seq_length), "pad_id": str(pad_id), "max_text_bytes": str(MAX_TEXT_BYTES),
              "overflow": "truncate", "overflow_stride": "0", "buckets": ",".join(map(str, spec.buckets)),
              "encoder_max_batch_sizes": ",".join(str(bucket_batch(spec.max_batch_tokens, b, spec.max_batch_size))
                                                  for b in spec.buckets),
              "max_batch_tokens": str(spec.max_batch_tokens), "pad_to_bucket": str(spec.pad_to_bucket).lower(),
              **bls_params(spec),
              "run_overhead_tokens": str(spec.run_overhead_tokens), "long_row_tokens": str(LONG_ROW_TOKENS),
              "embtrt.dim": str(spec.hidden_size), "pooler": "fused",
              "normalize": "false", "dimensions": "",
              "prompts": json.dumps(spec.prompt_map, sort_keys=True), "default_prompt_name": spec.default_prompt_name or "",
              "include_prompt": "true"})
    if spec.sparse_query_max_length:
        p.update({"query_route": "static", "query_max_length": str(spec.sparse_query_max_length)})
    if spec.sparse_max_active_dims:   # the folder's default, as SparseEncoder.encode applies it
        p["max_active_dims"] = str(spec.sparse_max_active_dims)
    return p


def doc_module(se):
    """The module that tokenizes and runs the documents: the first, or an inference-free SPLADE's
    document route's first."""
    return se[0].sub_modules["document"][0] if type(se[0]).__name__ == "Router" else se[0]


def doc_dir(spec: BuildSpec) -> Path:
    return spec.model_dir / spec.sparse_encoder_dir if spec.sparse_encoder_dir else spec.model_dir


def served_weights(core, encoder, texts: list[str], input_type: str, static=None,
                   default_k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Texts through the front door's request core (one request per 8 texts, batched together), or
    (queries of an inference-free SPLADE) its static query side; each vector's `default_k` largest
    weights kept (the folder's max_active_dims, as the front door keeps them)."""
    from embtrt_backend.core import Request
    from embtrt_backend.sparse import keep_largest, resolve

    opts, k, query = resolve(core.options, {"input_type": input_type}, default_k)
    if query and static is not None:
        weights, tokens = static.encode(texts, opts.prompt)
        return keep_largest(weights, k), tokens
    reqs = [Request(texts[i:i + 8], None, opts) for i in range(0, len(texts), 8)]
    outs = core.run(reqs, encoder)   # each bucket's graph (one for every bucket but TensorRT int8 / fp8)
    for o in outs:
        if o.error is not None:
            raise o.error
    return keep_largest(np.concatenate([o.vectors for o in outs]), k), np.concatenate([o.tokens for o in outs])


def gate(se, core, encoder, texts: list[str], log: Log, static=None, default_k: int | None = None,
         precision: str = "fp32") -> dict:
    """The sparse gate (reference.sparse_gate) on the served path, before anything is written."""
    served = {which: served_weights(core, encoder, texts, which, static, default_k) for which in ("document", "query")}
    return judge(se, texts, served, core.cfg.buckets, log, precision=precision).as_dict(lines=False)


def build_sparse_in(spec: BuildSpec, tmp: Path, texts: list[str], log: Log) -> BuildResult:
    from embtrt_backend.core import RequestCore

    work, repo = tmp / "work", tmp / "repo"
    repo.mkdir(parents=True)
    work.mkdir(parents=True)
    steps = 6
    log(f"[1/{steps}] reading {spec.model_dir} as a SparseEncoder (SPLADE, {spec.splade_pooling} pooling, {spec.activation}, "
        f"vocabulary {spec.hidden_size}, max length {spec.max_seq_length}, buckets {','.join(map(str, spec.buckets))}"
        + (f", max_active_dims {spec.sparse_max_active_dims} by default" if spec.sparse_max_active_dims else "") + ")")
    if spec.target == "python-openvino":
        require_openvino(spec.precision, log)
    msha = model_hash(spec.model_dir)
    se = load_sparse_encoder(spec.model_dir, spec.trust_remote_code)
    doc_module(se).max_seq_length = spec.max_seq_length

    onnx_path = work / "onnx" / "model.onnx"
    validation = export_step(spec, f"[2/{steps}]", "the MLM head with SPLADE pooling to ONNX and validating against "
                             "SparseEncoder", lambda: export_splade(se, spec, onnx_path, texts, log), log)

    log(f"[3/{steps}] tokenizer")
    tok_json = work / "tokenizer.json"
    hf_tok = doc_module(se).tokenizer
    hf_tok.backend_tokenizer.save(str(tok_json))
    pad_id = int(hf_tok.pad_token_id if hf_tok.pad_token_id is not None else 0)
    from .tokenizer import check_tokenizer

    check_tokenizer(spec.with_(model_dir=doc_dir(spec)), tok_json, pad_id, texts, log)
    static = None
    if spec.sparse_query_max_length:   # inference-free: the query side's tokenizer and weights, served as they are
        from embtrt_backend.sparse import StaticQuery

        from ..reference.sparse_ref import static_query_weights

        qmod = se[0].sub_modules["query"][0]
        qmod.tokenizer.backend_tokenizer.save(str(work / "query_tokenizer.json"))
        np.save(work / "embtrt_query_weights.npy", static_query_weights(se))
        static = StaticQuery(str(work / "query_tokenizer.json"), np.load(work / "embtrt_query_weights.npy"),
                             spec.sparse_query_max_length)
        log(f"inference-free SPLADE: queries are the static query side's weights ({spec.sparse_query_max_length} "
            "tokens at most, no special tokens), no encoder run")

    graph, prec, prec_record = precision_graph(spec, onnx_path, work, texts, tok_json, pad_id, log)
    log(f"[4/{steps}] the gate: served weights vs SparseEncoder.encode_document / encode_query on {len(texts)} real texts"
        + (" (padded to each bucket as its TensorRT plan runs)" if prec is not None else ""))
    params = front_params(spec, pad_id)
    encoder = kind_encoder(spec, params, graph, prec)
    core = RequestCore.from_folder(str(work), {**params, "max_seq_length": str(spec.max_seq_length)})
    report = gate(se, core, encoder, texts, log, static, spec.sparse_max_active_dims or None, spec.precision)
    refuse_on_gate(spec, report["passed"], report["failures"], "sparse encoder fails the gate",
                   f"{spec.precision} changes the weights beyond the reduced-precision gate for this model; use "
                   "--precision fp32" if spec.precision != "fp32" else "report the model architecture", log)

    log(f"[5/{steps}] rendering the front door {spec.name}")
    ident = {**identity(spec, msha), "embtrt.kind": SPARSE.name}
    params.pop("embtrt.dim")   # in the identity
    plan = ModelPlan(
        name=spec.name, template="router.pbtxt.j2", kind="front door",
        context={"version": __version__, "max_batch_size": spec.max_batch_size, "name": spec.name,
                 "inputs": [_t("TEXT", "TYPE_STRING", [1])],
                 "outputs": [_t("SPARSE_INDICES", "TYPE_INT64", [-1]), _t("SPARSE_VALUES", "TYPE_FP32", [-1]),
                             _t("TOKENS", "TYPE_INT64", [1])],
                 "batching": _batching(spec), "group": _group(spec.front_instances, spec.front_on_gpu),
                 "params": sorted(params.items()) + sorted(ident.items()),
                 "warmup": front_warmup(spec, [_t("TEXT", "TYPE_STRING", [1])])},
        files={"1/tokenizer.json": tok_json, **local_files(spec, graph),
               **({"1/query_tokenizer.json": work / "query_tokenizer.json",
                   "1/embtrt_query_weights.npy": work / "embtrt_query_weights.npy"} if static is not None else {})},
        backend_code=SPARSE.front_door, data=warmup_data(spec))
    encoders = bucket_encoders(spec, graph, SPARSE.encoder_output, spec.hidden_size, ident)
    bundle = write_front_door(spec, [plan, *encoders], repo, log)
    manifest = Manifest(
        name=spec.name, identity=ident, models=ModelNames(spec.name, (), tuple(e.name for e in encoders)),
        pooling=f"splade-{spec.splade_pooling}",
        normalize=False, dim=spec.hidden_size, buckets=spec.buckets, max_seq_length=spec.max_seq_length,
        overflow="truncate", overflow_stride=0, precision=spec.precision, target=spec.target,
        backend_profile=ident["embtrt.backend_profile"], pooler="fused", input_names=tuple(spec.input_names),
        encoder_output=SPARSE.encoder_output, pad_id=pad_id, max_batch_size=spec.max_batch_size, max_batch_tokens=spec.max_batch_tokens,
        bucket_max_batch={b: bucket_batch(spec.max_batch_tokens, b, spec.max_batch_size) for b in spec.buckets},
        router_encoder=spec.router_mode, server_python=spec.server_python, bundle=bundle, prompts=spec.prompt_map,
        default_prompt_name=spec.default_prompt_name, kind=SPARSE.name, activation=spec.activation,
        extra={"source": {"path": str(spec.model_dir), "sha256": msha},
               "spec": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(spec).items()},
               "versions": versions(), "onnx": onnx_record(onnx_path, graph, validation, prec), "precision_onnx": prec_record,
               "parity": {**report, "reference": "SparseEncoder.encode_query / encode_document (fp32)",
                          "allowed_mismatch": (not report["passed"]) and spec.allow_mismatch},
               "pending": [], "rebuild": rebuild_command(spec) + " --kind sparse",
               "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return finish(repo, manifest, f"[6/{steps}]", log, spec, prec, texts)
