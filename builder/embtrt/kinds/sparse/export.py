"""`embtrt build` of a sparse encoder (a SPLADE SparseEncoder folder): MLM head + SPLADE pooling ->
ONNX (one [rows, vocab] weight vector per text) -> the front door over the request core -> the
gate against SparseEncoder.encode_query / encode_document -> manifest -> check.

The served path is the front door's request core (embtrt_backend.core, fused: the graph pools)
and its sparsifying step (embtrt_backend.sparse_weights), so the gate judges exactly what is served.
docs/sparse.md has the contract.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from embtrt_backend.kinds import SPARSE

from ...common.log import Log
from ...errors import ParityError
from .reference_gate import TOLERANCE, judge
from ...reference.modelinfo import default_buckets
from .reference import doc_module, load_sparse_encoder, se_encode, splade_info
from ...export.render import _t, torch_dir
from ...export.single import FrontDoorBuild, export_head
from ...export.spec import BuildSpec

def export_splade(se, spec: BuildSpec, path: Path, texts: list[str], log: Log) -> dict:
    """MLM logits -> log(1 + relu(logits * mask)) (twice for log1p_relu) -> max or sum over the
    sequence (-> with --active-dims-in-graph each row's K largest kept): output `sparse` [rows,
    vocab]; validated against SparseEncoder on real texts."""
    import torch
    from transformers import AutoModelForMaskedLM

    from embtrt_backend.torch_encoder import splade_weights

    mlm = AutoModelForMaskedLM.from_pretrained(str(torch_dir(spec)), dtype=torch.float32, attn_implementation="eager",
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
    from embtrt_backend.sparse_weights import keep_largest

    got = keep_largest(got, spec.sparse_max_active_dims or None)   # as the front door keeps them
    worst = float(np.abs(got - se_encode(se, batch)).max())
    if worst > TOLERANCE:
        raise ParityError(f"the exported ONNX SPLADE head differs from SparseEncoder by {worst:.2e}",
                          "report the model architecture")
    log(f"[ok] ONNX SPLADE head equals SparseEncoder on real texts (max |weight difference| {worst:.1e})")
    return {"max_abs_diff": worst, "opset": 17}


def served_weights(core, encoder, texts: list[str], input_type: str, static=None,
                   default_k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Texts through the front door's request core (one request per 8 texts, batched together), or
    (queries of an inference-free SPLADE) its static query side; each vector's `default_k` largest
    weights kept (the folder's max_active_dims, as the front door keeps them)."""
    from embtrt_backend.core import Request
    from embtrt_backend.sparse_weights import keep_largest, resolve

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


class SparseBuild(FrontDoorBuild):
    """A SPLADE SparseEncoder folder's build: the MLM head with SPLADE pooling, the request core with
    the sparsifying step, SparseEncoder's gate (documents and queries)."""

    kind, changes, static = SPARSE, "weights", None
    exporting = "the MLM head with SPLADE pooling to ONNX and validating against SparseEncoder"
    reference = "SparseEncoder.encode_query / encode_document (fp32)"

    def reading(self) -> str:
        s = self.spec
        return (f"a SparseEncoder (SPLADE, {s.splade_pooling} pooling, {s.activation}, vocabulary {s.hidden_size}, "
                f"max length {s.max_seq_length}, buckets {','.join(map(str, s.buckets))}"
                + (f", max_active_dims {s.sparse_max_active_dims} by default" if s.sparse_max_active_dims else "") + ")")

    def load(self):
        se = load_sparse_encoder(self.spec.model_dir, self.spec.trust_remote_code)
        doc_module(se).max_seq_length = self.spec.max_seq_length
        return se

    def export(self, se, path: Path, texts: list[str]) -> dict:
        return export_splade(se, self.spec, path, texts, self.log)

    def hf_tokenizer(self, se):
        return doc_module(se).tokenizer

    def check_tokenizer(self, hf_tok, tok_json: Path, pad_id: int, work: Path, texts: list[str]) -> None:
        from ...export.tokenizer import check_tokenizer

        spec, log = self.spec, self.log
        check_tokenizer(spec.with_(model_dir=torch_dir(spec)), tok_json, pad_id, texts, log)
        if spec.sparse_query_max_length:   # inference-free: the query side's tokenizer and weights, served as they are
            from embtrt_backend.sparse_weights import StaticQuery

            from .reference import static_query_weights

            se = self.ref
            qmod = se[0].sub_modules["query"][0]
            qmod.tokenizer.backend_tokenizer.save(str(work / "query_tokenizer.json"))
            np.save(work / "embtrt_query_weights.npy", static_query_weights(se))
            self.static = StaticQuery(str(work / "query_tokenizer.json"), np.load(work / "embtrt_query_weights.npy"),
                                      spec.sparse_query_max_length)
            log(f"inference-free SPLADE: queries are the static query side's weights ({spec.sparse_query_max_length} "
                "tokens at most, no special tokens), no encoder run")

    def params(self, pad_id: int) -> dict[str, str]:
        s = self.spec
        p = {**super().params(pad_id), "overflow": "truncate", "overflow_stride": "0", "embtrt.dim": str(s.hidden_size),
             "pooler": "fused", "normalize": "false", "dimensions": "", "include_prompt": "true"}
        if s.sparse_query_max_length:
            p.update({"query_route": "static", "query_max_length": str(s.sparse_query_max_length)})
        if s.sparse_max_active_dims:   # the folder's default, as SparseEncoder.encode applies it
            p["max_active_dims"] = str(s.sparse_max_active_dims)
        return p

    def gating(self, texts: list[str]) -> str:
        return f"served weights vs SparseEncoder.encode_document / encode_query on {len(texts)} real texts"

    def gate(self, se, params: dict[str, str], encoder, work: Path, texts: list[str]) -> dict:
        from embtrt_backend.core import RequestCore

        core = RequestCore.from_folder(str(work), params)
        k = self.spec.sparse_max_active_dims or None
        served = {which: served_weights(core, encoder, texts, which, self.static, k) for which in ("document", "query")}
        return judge(se, texts, served, core.cfg.buckets, self.log, precision=self.spec.precision).as_dict(lines=False)

    def outputs(self) -> list[dict]:
        return [_t("SPARSE_INDICES", "TYPE_INT64", [-1]), _t("SPARSE_VALUES", "TYPE_FP32", [-1]),
                _t("TOKENS", "TYPE_INT64", [1])]

    def files(self, work: Path) -> dict[str, Path]:
        if self.static is None:
            return {}
        return {"1/query_tokenizer.json": work / "query_tokenizer.json",
                "1/embtrt_query_weights.npy": work / "embtrt_query_weights.npy"}

    def manifest_fields(self) -> dict:
        return {"pooling": f"splade-{self.spec.splade_pooling}", "pooler": "fused"}


build_sparse_in = SparseBuild.build_in


def spec_fields(model_dir: Path, max_seq_length: int | None, bucket_t: tuple[int, ...] | None, trust_remote_code: bool,
                overrides: dict[str, str], default_prompt: str | None, default_name: str | None) -> dict:
    """A SPLADE SparseEncoder's spec fields: max length, vocabulary, pooling and activation from the folder, and the
    options' prompts over its own (export.spec_options.spec_from_options sets them: Kind.spec_fields)."""
    se = load_sparse_encoder(model_dir, trust_remote_code)   # its own prompts (read_st_prompts converts it)
    info = splade_info(se, model_dir)
    seq = int(max_seq_length or info.max_length)
    prompts = {**{str(k): str(v) for k, v in (se.prompts or {}).items()}, **overrides}
    model_default = default_name if default_prompt is not None else se.default_prompt_name
    return dict(kind=SPARSE.name, activation=info.activation, splade_pooling=info.pooling,
                sparse_encoder_dir=info.encoder_dir, sparse_query_max_length=info.query_max_length,
                sparse_max_active_dims=int(getattr(se, "max_active_dims", None) or 0),
                max_seq_length=seq, buckets=bucket_t or default_buckets(seq), hidden_size=info.vocab,
                input_names=info.input_names, pooling="cls", normalize=False, pooler="fused",
                prompts=tuple(prompts.items()), default_prompt_name=model_default, overflow_stride=0)
