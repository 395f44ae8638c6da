"""`embtrt build` of a multi-vector encoder: a MultiVectorEncoder folder (ColBERT) or a bge-m3-style
folder -> the encoder and its heads as one ONNX graph (a vector per position: embtrt_backend.torch_encoder.
multivector_head) -> the front door over the multi-vector core -> the gate against encode_query /
encode_document and MaxSim (ColBERT) or BGEM3FlagModel's recipe (bge-m3) -> manifest -> check.

The served path is the front door's own core (embtrt_backend.kinds.multivector.core), so the gate
judges exactly what is served. docs/multivector.md has the contract.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from embtrt_backend.kinds import MULTIVECTOR

from ...errors import ParityError, SpecError
from ...export.render import _t
from ...export.single import FrontDoorBuild, export_head
from ...reference.modelinfo import default_buckets
from .reference import (M3Reference, MultiVectorInfo, colbert_encode, colbert_heads, colbert_info, is_multivector,
                        load_m3, load_multivector, m3_info)
from .reference_gate import judge_colbert, judge_m3

EXPORT_TOLERANCE = 1e-4
HEADS = "embtrt_heads.npz"


def served(core, encoder, texts: list[str], side: str):
    """Texts through the front door's core (one request per 8 texts, batched together) -> the outcomes."""
    from embtrt_backend.kinds.multivector.core import MultiVectorRequest

    opts = core.options({"input_type": side})
    outs = core.run([MultiVectorRequest(texts[i:i + 8], opts) for i in range(0, len(texts), 8)], encoder)
    for o in outs:
        if o.error is not None:
            raise o.error
    return outs


class MultiVectorBuild(FrontDoorBuild):
    """A multi-vector folder's build: one graph of the encoder and its heads, the multi-vector core,
    its gate (both sides for ColBERT; the three outputs for bge-m3)."""

    kind, changes = MULTIVECTOR, "token vectors"
    exporting = "the encoder with its heads (a vector per position) to ONNX"
    reference = "MultiVectorEncoder.encode_query / encode_document (fp32), or BGEM3FlagModel.encode's recipe"

    @property
    def info(self) -> MultiVectorInfo:
        return self._info

    def reading(self) -> str:
        p = dict(self.spec.multivector)
        if p["mv_layout"] == "m3":
            return (f"a bge-m3 folder (dense {p['mv_hidden']}, ColBERT {p['mv_dim']}, lexical weights; "
                    f"max length {self.spec.max_seq_length}, buckets {','.join(map(str, self.spec.buckets))})")
        exp = f", expanded with id {p['mv_expansion_id']}" if int(p["mv_expansion_id"]) >= 0 else ""
        return (f"a MultiVectorEncoder (ColBERT: {p['mv_dim']}-wide token vectors, queries {p['mv_query_length']} tokens"
                f"{exp}, documents {p['mv_document_length']}, {len([x for x in p['mv_skiplist'].split(',') if x])} "
                f"skiplisted ids, {p['mv_similarity']})")

    def load(self):
        s = self.spec
        if s.target == "tensorrt":
            raise SpecError("target tensorrt: multi-vector encoders build for the CPU targets and onnxruntime today",
                            "build with --target python-ort, python-openvino, python-torch or onnxruntime")
        if s.target == "python-torch" and s.router_mode != "local":
            raise SpecError("--router-encoder bls with python-torch: a multi-vector model's heads ride with its front door",
                            "leave --router-encoder at auto (local)")
        if is_multivector(s.model_dir):
            ref = load_multivector(s.model_dir, s.trust_remote_code)
            self._info, self._heads = colbert_info(ref, s.max_seq_length), colbert_heads(ref)
            ref[0].document_length = self._info.document_length   # the reference cuts documents as served
        else:
            ref = load_m3(s.model_dir, s.max_seq_length, s.trust_remote_code)
            self._info, self._heads = m3_info(ref), ref.heads
        self._info = MultiVectorInfo(**{**self._info.__dict__, "prompts": dict(s.prompts)})
        return ref

    @property
    def width(self) -> int:
        """Each position's encoder output: the vector (ColBERT), or [C | sparse weight] (bge-m3)."""
        i = self.info
        return max(i.dim, i.hidden) + 1 if i.layout == "m3" else i.dim

    def encoder_dims(self) -> list[int]:
        return [-1, self.width]

    def export(self, ref, path: Path, texts: list[str]) -> dict:
        import torch
        from transformers import AutoModel

        from embtrt_backend.torch_encoder import multivector_head

        s, info = self.spec, self.info
        model = AutoModel.from_pretrained(str(s.model_dir), dtype=torch.float32, attn_implementation="eager",
                                          trust_remote_code=s.trust_remote_code).eval()
        heads = {k: torch.from_numpy(v) for k, v in self._heads.items()}
        names = s.input_names

        class Head(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, *args):
                h = self.m(**dict(zip(names, args))).last_hidden_state
                return multivector_head(torch, h, heads, info.layout, info.normalize)

        tok = self.hf_tokenizer(ref)
        sample = tok(texts[:2], padding=True, truncation=True, max_length=s.max_seq_length, return_tensors="pt")
        head = Head().eval()   # in eval mode: the export restores the wrapper's mode, and with it the encoder's
        sess = export_head(head, tuple(sample[n] for n in names), path, names, MULTIVECTOR.encoder_output)
        model.eval()
        worst = 0.0
        for rows in (1, 3, 8):
            enc = tok(texts[5:5 + rows], padding=True, truncation=True, max_length=s.max_seq_length, return_tensors="pt")
            with torch.inference_mode():
                want = head(*(enc[n] for n in names)).numpy()
            got = sess.run([MULTIVECTOR.encoder_output], {n: enc[n].numpy() for n in names})[0]
            mask = enc["attention_mask"].numpy().astype(bool)
            worst = max(worst, float(np.abs(got - want)[mask].max()))
        if worst > EXPORT_TOLERANCE:
            raise ParityError(f"the exported ONNX multi-vector graph differs from PyTorch by {worst:.2e}",
                              "report the model architecture")
        self.log(f"[ok] ONNX graph equals the PyTorch encoder and heads on real texts (max |difference| {worst:.1e})")
        return {"max_abs_diff": worst, "opset": 17}

    def hf_tokenizer(self, ref):
        return ref.tokenizer if isinstance(ref, M3Reference) else ref[0].tokenizer

    def check_tokenizer(self, hf_tok, tok_json: Path, pad_id: int, work: Path, texts: list[str]) -> None:
        """The serving tokenizer cuts each side as the reference's: the prompt prepended, truncation at the
        side's length, special tokens kept (queries before their expansion)."""
        from tokenizers import Tokenizer

        ours = Tokenizer.from_file(str(tok_json))
        ours.no_padding()
        info, bad = self.info, []
        for side, length in (("query", info.query_length), ("document", info.document_length)):
            prompt = self._prompt(side)
            ours.enable_truncation(max_length=length)
            got = [e.ids for e in ours.encode_batch([prompt + t for t in texts], add_special_tokens=True)]
            want = hf_tok([prompt + t for t in texts], truncation=True, max_length=length)["input_ids"]
            bad += [(side, i) for i, (a, b) in enumerate(zip(got, want)) if list(a) != list(b)]
        if bad:
            raise ParityError(f"the serving tokenizer differs from the reference's on {len(bad)} texts (first: the "
                              f"{bad[0][0]} {texts[bad[0][1]][:60]!r})", "the tokenizer.json lacks settings of the HF tokenizer")
        self.log(f"[ok] serving tokenizer equals the reference's on {len(texts)} texts, as queries and as documents")

    def _prompt(self, side: str) -> str:
        from embtrt_backend.kinds.multivector.core import resolve

        return resolve({"input_type": side}, self.info.prompts).prompt

    def params(self, pad_id: int) -> dict[str, str]:
        return {**super().params(pad_id), **self.info.params(), "overflow": "truncate", "overflow_stride": "0",
                "embtrt.dim": str(self.info.dim), "pooler": "fused", "normalize": "false", "dimensions": "",
                "include_prompt": "true", "trim_padding": "false", "prompts": __import__("json").dumps(self.info.prompts)}

    def gating(self, texts: list[str]) -> str:
        if self.info.layout == "m3":
            return f"served dense, lexical and ColBERT outputs vs BGEM3FlagModel.encode's recipe on {len(texts)} real texts"
        return (f"served token vectors vs MultiVectorEncoder.encode_query / encode_document and {self.info.similarity} "
                f"on {len(texts)} real texts")

    def gate(self, ref, params: dict[str, str], encoder, work: Path, texts: list[str]) -> dict:
        from embtrt_backend.kinds.multivector.core import MultiVectorCore

        core = MultiVectorCore.from_folder(str(work), params)
        prec = self.spec.precision
        if self.info.layout == "m3":
            outs = served(core, encoder, texts, "document")
            got = {"dense": np.concatenate([o.dense for o in outs]), "colbert": [v for o in outs for v in o.vectors],
                   "lexical": [x for o in outs for x in o.sparse], "tokens": np.concatenate([o.tokens for o in outs])}
            return judge_m3(ref.encode(texts), texts, got, core.cfg.buckets, self.log, prec).as_dict(lines=False)
        sides = {}
        for side in ("query", "document"):
            outs = served(core, encoder, texts, side)
            sides[side] = ([v for o in outs for v in o.vectors], np.concatenate([o.tokens for o in outs]))
        return judge_colbert(lambda t, side: colbert_encode(ref, t, side), texts, sides, core.cfg.buckets,
                             self.info.similarity, self.log, prec).as_dict(lines=False)

    def outputs(self) -> list[dict]:
        out = [_t("TOKEN_EMBEDDINGS", "TYPE_FP32", [-1, self.info.dim]), _t("TOKEN_COUNTS", "TYPE_INT64", [1])]
        if self.info.layout == "m3":
            out += [_t("DENSE", "TYPE_FP32", [self.info.hidden]), _t("SPARSE_INDICES", "TYPE_INT64", [-1]),
                    _t("SPARSE_VALUES", "TYPE_FP32", [-1])]
        return out + [_t("TOKENS", "TYPE_INT64", [1])]

    def files(self, work: Path) -> dict[str, Path]:
        """python-torch's encoder reads the heads beside 1/hf/ (the other targets have them in the graph)."""
        if self.spec.target != "python-torch":
            return {}
        np.savez(work / HEADS, **self._heads)
        return {f"1/{HEADS}": work / HEADS}

    def manifest_fields(self) -> dict:
        return {"pooling": f"tokens-{self.info.layout}", "pooler": "fused"}


build_multivector_in = MultiVectorBuild.build_in


def spec_fields(model_dir: Path, max_seq_length: int | None, bucket_t: tuple[int, ...] | None, trust_remote_code: bool,
                overrides: dict[str, str], default_prompt: str | None, default_name: str | None) -> dict:
    """A multi-vector folder's spec fields: the layout, widths, lengths, expansion and skiplist its reference
    reads of the folder (export.spec_options.spec_from_options sets them: Kind.spec_fields); prompts as the
    model's (the request's input_type picks the side's)."""
    if is_multivector(model_dir):
        info = colbert_info(load_multivector(model_dir, trust_remote_code), max_seq_length)
    else:
        info = m3_info(load_m3(model_dir, max_seq_length, trust_remote_code))
    prompts = {**info.prompts, **overrides}
    info = MultiVectorInfo(**{**info.__dict__, "prompts": prompts})
    seq = info.max_length
    return dict(kind=MULTIVECTOR.name, multivector=tuple(info.params().items()), max_seq_length=seq,
                buckets=bucket_t or default_buckets(seq), hidden_size=info.dim, input_names=info.input_names,
                pooling="cls", normalize=False, pooler="fused", prompts=tuple(prompts.items()),
                default_prompt_name=None, overflow_stride=0)
