"""`embtrt build` of a text-and-image embedder (a CLIP-style sentence-transformers folder) -> the text tower
(`get_text_features(...).pooler_output`: rows and length dynamic, one graph for every bucket) and the image
tower (`get_image_features(pixel_values).pooler_output`: the processor's fixed size) to ONNX, each checked
against SentenceTransformer.encode -> the front door over the embedder's request core (texts) and the image
core (embtrt_backend.image_core) -> the gate against encode on real texts and seeded images as data URIs ->
manifest -> check. docs/images.md has the contract.

Local encoders (python-ort, python-openvino, python-torch) hold both towers in the front door (1/model.onnx,
1/image.onnx; python-torch the one PyTorch model); onnxruntime calls one encoder model per text bucket and
one for the image tower (NAME_image) over BLS. Reduced precision: int8 / fp16 graphs quantize the text
tower (the image tower stays fp32); OpenVINO bf16 and python-torch bf16 run both towers reduced."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import MULTIMODAL

from ... import __version__
from ...errors import ParityError, SpecError
from ...export.render import ModelPlan, _batching, _group, _t, torch_dir
from ...export.single import FrontDoorBuild, export_head
from ...reference.modelinfo import default_buckets
from .reference import (MultimodalInfo, data_uri, encode_images, encode_texts, gate_images, info_of, is_multimodal,
                        load_reference)
from .reference_gate import judge

EXPORT_TOLERANCE = 1e-4
IMAGE_GRAPH = "image.onnx"
IMAGE_OUTPUT = "image_embeds"
IMAGE_MAX_BATCH = 32   # rows per image-tower run (at most the front door's max batch)


def export_image_tower(model, path: Path, size: tuple[int, int]):
    """The image tower to ONNX: pixel_values [rows, 3, H, W] -> [rows, dim]; an ONNX Runtime session on it."""
    import torch

    class Tower(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, pixel_values):
            out = self.m.get_image_features(pixel_values=pixel_values)
            return getattr(out, "pooler_output", out)   # transformers 5: an output object; 4: the tensor

    return export_head(Tower().eval(), (torch.zeros(2, 3, *size),), path, ["pixel_values"], IMAGE_OUTPUT, length=False)


class MultimodalBuild(FrontDoorBuild):
    kind, changes = MULTIMODAL, "vectors"
    exporting = "the text tower and the image tower to ONNX"
    reference = "SentenceTransformer.encode of texts and of images as data URIs (fp32)"

    @property
    def info(self) -> MultimodalInfo:
        return self._info

    @property
    def width(self) -> int:
        return self.info.dim

    def reading(self) -> str:
        i = self.info if hasattr(self, "_info") else None
        if i is None:
            return "a text-and-image embedder (CLIP-style)"
        return (f"a text-and-image embedder (CLIP-style: texts up to {i.max_length} tokens, buckets "
                f"{','.join(map(str, self.spec.buckets))}; images {i.image_size[1]} x {i.image_size[0]}; vectors of {i.dim})")

    def load(self):
        s = self.spec
        if s.target == "tensorrt":
            raise SpecError("target tensorrt: text-and-image embedders build for the CPU targets and onnxruntime today",
                            "build with --target python-ort, python-openvino, python-torch or onnxruntime")
        if s.target != "onnxruntime" and s.router_mode != "local":
            raise SpecError(f"--router-encoder bls with {s.target}: a text-and-image model's towers ride with its front door",
                            "leave --router-encoder at auto (local)")
        ref = load_reference(s.model_dir, s.trust_remote_code)
        self._info = info_of(ref, s.model_dir)
        self.log(f"      {self.reading()}")
        return ref

    def _torch_model(self):
        import torch
        from transformers import AutoModel

        return AutoModel.from_pretrained(str(torch_dir(self.spec)), dtype=torch.float32, attn_implementation="eager",
                                         trust_remote_code=self.spec.trust_remote_code).eval()

    def export(self, ref, path: Path, texts: list[str]) -> dict:
        import torch

        from embtrt_backend.images import ProcessorConfig, decode, pixel_values

        s, info = self.spec, self.info
        model = self._torch_model()
        names = s.input_names

        class Text(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, *args):
                out = self.m.get_text_features(**dict(zip(names, args)))
                return getattr(out, "pooler_output", out)   # transformers 5: an output object; 4: the tensor

        tok = self.hf_tokenizer(ref)
        enc = lambda batch: tok(batch, padding=True, truncation=True, max_length=s.max_seq_length, return_tensors="pt")
        sample = enc(texts[:2])
        sess = export_head(Text().eval(), tuple(sample[n] for n in names), path, names, MULTIMODAL.encoder_output)
        worst_text = 0.0
        for rows in (1, 3, 8):
            batch = texts[5:5 + rows]
            e = enc(batch)
            got = sess.run([MULTIMODAL.encoder_output], {n: e[n].numpy() for n in names})[0]
            worst_text = max(worst_text, float(np.abs(got - encode_texts(ref, batch)).max()))
        image_sess = export_image_tower(model, path.parent / IMAGE_GRAPH, info.image_size)
        cfg = ProcessorConfig.from_dict(info.processor)
        files = gate_images(6, seed=7)
        px = np.stack([pixel_values(decode(f), cfg) for f, _ in files])
        got = image_sess.run([IMAGE_OUTPUT], {"pixel_values": px})[0]
        worst_image = float(np.abs(got - encode_images(ref, [data_uri(f, fmt) for f, fmt in files])).max())
        worst = max(worst_text, worst_image)
        if worst > EXPORT_TOLERANCE:
            raise ParityError(f"the exported ONNX towers differ from SentenceTransformer.encode by {worst:.2e} (text "
                              f"{worst_text:.1e}, image {worst_image:.1e})", "report the model architecture")
        self.log(f"[ok] ONNX towers equal SentenceTransformer.encode (max |difference|: texts {worst_text:.1e}, "
                 f"images {worst_image:.1e})")
        return {"max_abs_diff": worst, "text_max_abs_diff": worst_text, "image_max_abs_diff": worst_image, "opset": 17}

    def hf_tokenizer(self, ref):
        return ref[0].processor.tokenizer

    def check_tokenizer(self, hf_tok, tok_json: Path, pad_id: int, work: Path, texts: list[str]) -> None:
        """The served tokenizer (TextTokenizer, with its truncation) gives the reference's ids: the embedder's check,
        on the Hugging Face files' folder (an old CLIPModel module's)."""
        from ...export.tokenizer import check_tokenizer

        check_tokenizer(self.spec.with_(model_dir=torch_dir(self.spec)), tok_json, pad_id, texts, self.log)

    def image_max_batch(self) -> int:
        return min(IMAGE_MAX_BATCH, self.spec.max_batch_size)

    def params(self, pad_id: int) -> dict[str, str]:
        p = {**super().params(pad_id), "overflow": "truncate", "overflow_stride": "0", "embtrt.dim": str(self.info.dim),
             "pooler": "fused", "normalize": "false", "dimensions": "", "include_prompt": "true", "towers": "image",
             "image_max_batch": str(self.image_max_batch())}
        if self.spec.router_mode != "local":
            p.update({"tower_image_model": f"{self.spec.name}_image", "tower_image_output": IMAGE_OUTPUT})
        return p

    def outputs(self) -> list[dict]:
        return [_t("EMBEDDING", "TYPE_FP32", [-1]), _t("EMBEDDING_INT8", "TYPE_INT8", [-1]),
                _t("EMBEDDING_UINT8", "TYPE_UINT8", [-1]), _t("TOKENS", "TYPE_INT64", [1])]

    def gating(self, texts: list[str]) -> str:
        return (f"served text and image vectors vs SentenceTransformer.encode on {len(texts)} real texts and "
                "16 seeded images (data URIs)")

    def gate(self, ref, params: dict[str, str], encoder, work: Path, texts: list[str]) -> dict:
        from embtrt_backend.core import Request, RequestCore
        from embtrt_backend.encoder import make_encoder
        from embtrt_backend.images import ImageLimits, ProcessorConfig
        from embtrt_backend.image_core import ImageCore

        core = RequestCore.from_folder(str(work), params)
        opts = core.options.default
        outs = core.run([Request(texts[i:i + 8], None, opts) for i in range(0, len(texts), 8)], encoder)
        for o in outs:
            if o.error is not None:
                raise o.error
        got_text, tokens = np.concatenate([o.vectors for o in outs]), np.concatenate([o.tokens for o in outs])
        text_enc = next(iter(encoder.by_bucket.values()))
        if hasattr(text_enc, "tower"):   # python-torch: the one model's image tower
            tower = text_enc.tower("image").run
        else:
            graph = work / "onnx" / IMAGE_GRAPH
            tower = make_encoder(params, str(graph), None).run
        images = ImageCore(ProcessorConfig.from_dict(self.info.processor), ImageLimits(), self.image_max_batch())
        files = gate_images()
        served = images.run([images.prepare([f for f, _ in files[i:i + 4]], opts) for i in range(0, len(files), 4)],
                            tower, core.options.finish)
        for o in served:
            if o.error is not None:
                raise o.error
        got_image = np.concatenate([o.vectors for o in served])
        want_text = encode_texts(ref, texts)
        want_image = encode_images(ref, [data_uri(f, fmt) for f, fmt in files])
        return judge(want_text, got_text, tokens, core.cfg.buckets, want_image, got_image, self.spec.precision,
                     self.log).as_dict(lines=False)

    def files(self, work: Path) -> dict[str, Path]:
        proc = work / "image_processor.json"
        proc.write_text(json.dumps(self.info.processor, sort_keys=True), encoding="utf-8")
        out = {"1/image_processor.json": proc}
        if self.spec.target != "python-torch" and self.spec.router_mode == "local":
            out["1/" + IMAGE_GRAPH] = work / "onnx" / IMAGE_GRAPH
        return out

    def extra_plans(self, ident: dict[str, str], work: Path) -> list[ModelPlan]:
        """onnxruntime (BLS): the image tower's encoder model, NAME_image."""
        s = self.spec
        if s.router_mode == "local":
            return []
        name, mb = f"{s.name}_image", self.image_max_batch()
        h, w = self.info.image_size
        pixels = _t("pixel_values", "TYPE_FP32", [3, h, w])
        ctx = {"version": __version__, "max_batch_size": mb, "name": name, "tower": "image", "precision": "fp32",
               "inputs": [pixels], "outputs": [_t(IMAGE_OUTPUT, "TYPE_FP32", [self.info.dim])],
               "batching": _batching(s, tuple(p for p in s.preferred_batch_sizes if p <= mb) or (mb,)),
               "group": _group(s.instances, s.gpu), "device": "GPU" if s.gpu else "CPU",
               "graph_level": 1, "trt_accelerator": None,
               "backend_params": [("intra_op_thread_count", str(s.ort_threads)), ("inter_op_thread_count", "1")],
               "params": sorted(ident.items()), "warmup": [{"name": "image_batch_1", "batch_size": 1, "inputs": [pixels]}]}
        graph = work / "onnx" / IMAGE_GRAPH
        return [ModelPlan(name, "encoder_onnxruntime.pbtxt.j2", ctx, files={"1/model.onnx": graph}, kind="encoder")]

    def manifest_fields(self) -> dict:
        return {"pooling": "projection", "pooler": "fused"}


build_multimodal_in = MultimodalBuild.build_in


def spec_fields(model_dir: Path, max_seq_length: int | None, bucket_t: tuple[int, ...] | None, trust_remote_code: bool,
                overrides: dict[str, str], default_prompt: str | None, default_name: str | None) -> dict:
    """A text-and-image folder's spec fields: the text tower's length and buckets, the projection's width, the
    Hugging Face files' folder, the prompts (texts only)."""
    if not is_multimodal(model_dir):
        raise SpecError(f"{model_dir} is not a text-and-image sentence-transformers folder", "point at a CLIP-style folder")
    ref = load_reference(model_dir, trust_remote_code)
    info = info_of(ref, model_dir)
    seq = info.max_length
    if max_seq_length is not None:
        if max_seq_length > seq:
            raise SpecError(f"--max-seq-length {max_seq_length}: the text tower takes at most {seq} tokens",
                            f"leave it out or give at most {seq}")
        seq = max_seq_length
    prompts = {**info.prompts, **overrides}
    default = default_name if default_prompt is not None else info.default_prompt_name
    return dict(kind=MULTIMODAL.name, max_seq_length=seq, buckets=bucket_t or default_buckets(seq), hidden_size=info.dim,
                input_names=("input_ids", "attention_mask"), pooling="cls", normalize=False, pooler="fused",
                prompts=tuple(prompts.items()), default_prompt_name=default, overflow_stride=0, hf_subdir=info.hf_dir)
