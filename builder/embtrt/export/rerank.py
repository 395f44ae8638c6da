"""`embtrt build` of a reranker (a CrossEncoder folder): classifier -> ONNX (logits) -> the pair
tokenizer -> the gate against CrossEncoder.predict / rank -> the front door -> manifest -> check.

The served path is the front door's own pair core (embtrt_backend.pairs) over the encoder the
front door runs (embtrt_backend.encoder, from the same parameters), so the gate judges exactly
what is served. docs/rerankers.md has the contract.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import RERANKER

from .. import __version__
from ..common.log import Log
from ..errors import ParityError
from ..reference.cross_ref import corpus_pairs, load_cross_encoder
from ..reference.rerank_gate import SCORE_TOLERANCE, judge
from ..reference.modelinfo import model_hash
from ..repository.manifest import Manifest, ModelNames
from .single import (bls_params, bucket_encoders, export_head, export_step, finish, kind_encoder, local_files, onnx_record, precision_graph,
                     write_front_door)
from .encoders import identity, rebuild_command, refuse_on_gate, require_openvino, versions
from .render import (LONG_ROW_TOKENS, MAX_TEXT_BYTES, ModelPlan, _batching, _group, _t, front_warmup,
                     runtime_params, warmup_data)
from .spec import BuildSpec



def export_classifier(ce, input_names: tuple[str, ...], path: Path, pairs: list[tuple[str, str]], log: Log,
                      trust_remote_code: bool = False) -> dict:
    """The *ForSequenceClassification model -> ONNX with output `logits` [rows, labels], dynamic
    rows and length; validated against PyTorch on real pairs at shapes not used for export."""
    import torch
    from transformers import AutoModelForSequenceClassification

    # eager attention exports a graph that masks by the input (SDPA's traced mask can be specialized to the
    # export shape); the validation below compares it with the CrossEncoder's own model
    model = AutoModelForSequenceClassification.from_pretrained(
        str(ce.model.name_or_path), dtype=torch.float32, attn_implementation="eager",
        trust_remote_code=trust_remote_code).eval()
    served = ce.model.eval()
    tok = ce.tokenizer

    class Head(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *args):
            return self.m(**dict(zip(input_names, args))).logits

    sample = tok([p[0] for p in pairs[:2]], [p[1] for p in pairs[:2]], padding=True, truncation="longest_first",
                 max_length=ce.max_seq_length, return_tensors="pt")
    sess = export_head(Head(model), tuple(sample[n] for n in input_names), path, input_names, RERANKER.encoder_output)
    worst = 0.0
    for rows in (1, 3, 8):
        batch = pairs[:rows] if rows > 2 else pairs[-rows:]
        enc = tok([p[0] for p in batch], [p[1] for p in batch], padding=True, truncation="longest_first",
                  max_length=ce.max_seq_length, return_tensors="pt")
        with torch.inference_mode():
            want = Head(served)(*(enc[n] for n in input_names)).numpy()
        got = sess.run([RERANKER.encoder_output], {n: enc[n].numpy() for n in input_names})[0]
        worst = max(worst, float(np.abs(got - want).max()))
    if worst > SCORE_TOLERANCE:
        raise ParityError(f"the exported ONNX classifier differs from PyTorch by {worst:.2e} in its logits",
                          "report the model architecture")
    log(f"[ok] ONNX classifier equals PyTorch on real pairs (max |logit difference| {worst:.1e})")
    return {"max_abs_logit_diff": worst, "opset": 17}


def front_params(spec: BuildSpec, pad_id: int) -> dict[str, str]:
    """The front door's parameters: what the pair core and the encoder are built from."""
    from ..repository.budget import bucket_batch

    p = dict(runtime_params(spec, RERANKER.encoder_output))
    p.update({"max_seq_length": str(spec.max_seq_length), "pad_id": str(pad_id), "max_text_bytes": str(MAX_TEXT_BYTES),
              "buckets": ",".join(map(str, spec.buckets)),
              "encoder_max_batch_sizes": ",".join(str(bucket_batch(spec.max_batch_tokens, b, spec.max_batch_size))
                                                  for b in spec.buckets),
              "max_batch_tokens": str(spec.max_batch_tokens), "pad_to_bucket": str(spec.pad_to_bucket).lower(),
              **bls_params(spec), "run_overhead_tokens": str(spec.run_overhead_tokens),
              "long_row_tokens": str(LONG_ROW_TOKENS), "num_labels": str(spec.num_labels),
              "activation": spec.activation,
              "prompts": json.dumps(spec.prompt_map, sort_keys=True), "default_prompt_name": spec.default_prompt_name or ""})
    return p


def served_scores(core, encoder, queries: list[str], docs: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Every (query, document) pair through the front door's pair core, one request per query
    (batched together as Triton's dynamic batcher would): scores [pairs, labels], tokens per pair."""
    from embtrt_backend.pairs import PairRequest

    opts = core.options({})   # the model's default prompt, as CrossEncoder.predict applies it
    reqs = [PairRequest([q] * len(d), list(d), opts) for q, d in zip(queries, docs)]
    outs = core.run(reqs, encoder)
    for o in outs:
        if o.error is not None:
            raise o.error
    return np.concatenate([o.scores for o in outs]), np.concatenate([o.tokens for o in outs])


def gate(ce, core, encoder, texts: list[str], log: Log, precision: str = "fp32") -> dict:
    """The reranker gate (reference.rerank_gate) on the served path, before anything is written."""
    queries, docs = corpus_pairs(texts)
    got, tokens = served_scores(core, encoder, queries, docs)
    return judge(ce, queries, docs, got, tokens, core.cfg.buckets, log, precision=precision).as_dict(lines=False)


def build_reranker_in(spec: BuildSpec, tmp: Path, texts: list[str], log: Log):
    from embtrt_backend.pairs import PairCore

    work, repo = tmp / "work", tmp / "repo"
    repo.mkdir(parents=True)
    work.mkdir(parents=True)
    steps = 6
    log(f"[1/{steps}] reading {spec.model_dir} as a CrossEncoder (reranker: {spec.num_labels} label(s), activation "
        f"{spec.activation}, max length {spec.max_seq_length}, buckets {','.join(map(str, spec.buckets))})")
    if spec.target == "python-openvino":
        require_openvino(spec.precision, log)
    msha = model_hash(spec.model_dir)
    ce = load_cross_encoder(spec.model_dir, spec.max_seq_length, spec.trust_remote_code)
    queries, docs = corpus_pairs(texts)
    pairs = [(q, d) for q, ds in zip(queries, docs) for d in ds]

    onnx_path = work / "onnx" / "model.onnx"
    validation = export_step(spec, f"[2/{steps}]", "the classifier to ONNX and validating against PyTorch",
                             lambda: export_classifier(ce, spec.input_names, onnx_path, pairs, log, spec.trust_remote_code), log)

    log(f"[3/{steps}] pair tokenizer")
    tok_json = work / "tokenizer.json"
    hf_tok = ce.tokenizer
    hf_tok.backend_tokenizer.save(str(tok_json))
    pad_id = int(hf_tok.pad_token_id if hf_tok.pad_token_id is not None else 0)
    tok = _tokenizer(tok_json, spec, pad_id)   # the front door's, built once: checked here, then the gate's core
    check_pair_tokenizer(hf_tok, tok, pairs, log)
    graph, prec, prec_record = precision_graph(spec, onnx_path, work, texts, tok_json, pad_id, log)

    log(f"[4/{steps}] the gate: served scores vs CrossEncoder.predict and .rank on {len(pairs)} real pairs"
        + (f" ({spec.precision} ONNX, padded to each bucket as its TensorRT plan runs)" if prec is not None else ""))
    params = front_params(spec, pad_id)
    encoder = kind_encoder(spec, params, graph, prec)
    core = PairCore(_config(params), tok)
    report = gate(ce, core, encoder, texts, log, spec.precision)
    refuse_on_gate(spec, report["passed"], report["failures"], "reranker fails the gate",
                   f"{spec.precision} changes the scores beyond the reduced-precision gate for this model; use "
                   "--precision fp32" if spec.precision != "fp32" else "report the model architecture", log)

    log(f"[5/{steps}] rendering the front door {spec.name}")
    ident = {**identity(spec, msha), "embtrt.kind": RERANKER.name}
    pair_in = [_t(name, "TYPE_STRING", [1]) for name in RERANKER.inputs]
    plan = ModelPlan(
        name=spec.name, template="router.pbtxt.j2", kind="front door",
        context={"version": __version__, "max_batch_size": spec.max_batch_size, "name": spec.name,
                 "inputs": pair_in,
                 "outputs": [_t("SCORES", "TYPE_FP32", [spec.num_labels]), _t("TOKENS", "TYPE_INT64", [1])],
                 "batching": _batching(spec), "group": _group(spec.front_instances, spec.front_on_gpu),
                 "params": sorted(params.items()) + sorted(ident.items()),
                 "warmup": front_warmup(spec, pair_in)},
        files={"1/tokenizer.json": tok_json, **local_files(spec, graph)},
        backend_code=RERANKER.front_door, data=warmup_data(spec))
    encoders = bucket_encoders(spec, graph, RERANKER.encoder_output, spec.num_labels, ident)
    bundle = write_front_door(spec, [plan, *encoders], repo, log)
    from ..repository.budget import bucket_batch

    manifest = Manifest(
        name=spec.name, identity=ident, models=ModelNames(spec.name, (), tuple(e.name for e in encoders)),
        pooling="none", normalize=False, dim=spec.num_labels, buckets=spec.buckets, max_seq_length=spec.max_seq_length, overflow="truncate",
        overflow_stride=0, precision=spec.precision, target=spec.target,
        backend_profile=ident["embtrt.backend_profile"], pooler="none", input_names=tuple(spec.input_names),
        encoder_output=RERANKER.encoder_output, pad_id=pad_id, max_batch_size=spec.max_batch_size,
        max_batch_tokens=spec.max_batch_tokens,
        bucket_max_batch={b: bucket_batch(spec.max_batch_tokens, b, spec.max_batch_size) for b in spec.buckets},
        router_encoder=spec.router_mode, server_python=spec.server_python, bundle=bundle,
        kind=RERANKER.name, num_labels=spec.num_labels, activation=spec.activation, prompts=spec.prompt_map,
        default_prompt_name=spec.default_prompt_name,
        extra={"source": {"path": str(spec.model_dir), "sha256": msha},
               "spec": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(spec).items()},
               "versions": versions(),
               "onnx": onnx_record(onnx_path, graph, validation, prec), "precision_onnx": prec_record,
               "parity": {**report, "reference": "CrossEncoder.predict (fp32, batch 32) and CrossEncoder.rank",
                          "allowed_mismatch": (not report["passed"]) and spec.allow_mismatch},
               "pending": [], "rebuild": rebuild_command(spec) + " --kind reranker",
               "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return finish(repo, manifest, f"[6/{steps}]", log, spec, prec, texts)


def _config(params: dict[str, str]):
    from embtrt_backend.pairs import PairConfig

    return PairConfig.from_parameters(params)


def _tokenizer(tok_json: Path, spec: BuildSpec, pad_id: int):
    from embtrt_backend.pairs import PairTokenizer

    return PairTokenizer(str(tok_json), spec.max_seq_length, pad_id)


def check_pair_tokenizer(hf_tok, tok, pairs: list[tuple[str, str]], log: Log) -> None:
    """The serving pair tokenizer (`tok`, embtrt_backend.pairs.PairTokenizer) gives CrossEncoder's ids
    (and segment ids) on every real pair, the over-long ones cut longest_first at the max length."""
    from embtrt_backend.pairs import DEFAULT

    max_length = tok.max_length
    ours = tok.encode([p[0] for p in pairs], [p[1] for p in pairs], DEFAULT)
    ref = hf_tok([p[0] for p in pairs], [p[1] for p in pairs], truncation="longest_first", max_length=max_length)
    bad = [i for i, a in enumerate(ours.ids) if list(a) != list(ref["input_ids"][i])]
    if "token_type_ids" in ref:
        bad += [i for i, a in enumerate(ours.type_ids) if list(a) != list(ref["token_type_ids"][i])]
    if bad:
        raise ParityError(f"the serving pair tokenizer differs from CrossEncoder's on {len(set(bad))} of {len(pairs)} "
                          f"pairs (first: {pairs[bad[0]][1][:60]!r})", "the tokenizer.json lacks settings of the HF tokenizer")
    cut = int(sum(len(x) == max_length for x in ours.ids))
    log(f"[ok] serving pair tokenizer equals CrossEncoder's on {len(pairs)} pairs ({cut} cut at {max_length} tokens)")
