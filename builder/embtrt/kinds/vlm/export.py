"""`embtrt build` of a VLM embedder (#70 item 2, Qwen3-VL-Embedding-style) on python-torch: the folder's model runs in
the front door (1/hf/: the model, its tokenizer with the chat template, its image processor) -> the gate on the front
door's own core (kinds.vlm.core) against the model card's computation one input at a time (kinds.vlm.reference) on
real texts, 16 seeded images and texts fused with images (kinds.vlm.reference_gate: cosine >= 0.99999 at fp32;
--precision bf16, or fp16 on CUDA: 0.999 texts, 0.995 images, retrieval overlap) -> manifest -> check.
docs/visual-documents.md has the contract. Only python-torch builds (no ONNX export of the model: the other targets
are refused saying so)."""

from __future__ import annotations

from pathlib import Path

from embtrt_backend.kinds import VLM

from ...errors import SpecError
from ...export.render import _t
from ...export.single import FrontDoorBuild
from ...reference.images import data_uri, gate_images
from ...reference.modelinfo import one_input_buckets
from .reference import VlmReference, embed, load_reference
from .reference_gate import GROUPS, judge

GATE_TEXTS = 16
DEFAULT_TOKENS = 1024


class VlmBuild(FrontDoorBuild):
    kind, changes = VLM, "vectors"
    reference = "the model card's recipe with transformers (chat template, last token, normalised; fp32)"
    changes = "vectors"
    targets_why = ("the vision-language model's ONNX export is not done, so no ONNX Runtime, OpenVINO or TensorRT "
                   "graph exists")

    @property
    def width(self) -> int:
        return self.ref.hidden

    def reading(self) -> str:
        return f"a VLM embedder (Qwen3-VL-style: texts, images or both fused; inputs up to {self.spec.max_seq_length} tokens)"

    def load(self) -> VlmReference:
        s = self.spec
        if s.router_mode != "local":
            raise SpecError("a VLM embedder builds with its model in the front door", "leave --router-encoder out")
        return load_reference(s.model_dir, s.trust_remote_code)

    def hf_tokenizer(self, ref):
        return ref.tokenizer

    def check_tokenizer(self, hf_tok, tok_json: Path, pad_id: int, work: Path, texts: list[str]) -> None:
        self.log("[ok] the front door renders and tokenizes with the model's own tokenizer and chat template (1/hf/)")

    def params(self, pad_id: int) -> dict[str, str]:
        r = self.ref
        # on CUDA, runs of texts alone on CUDA graphs per (bucket, batch size); a run with an image (its patches vary
        # with its size) runs eagerly (torch_graphs.GraphSet.run)
        return {**super().params(pad_id), "overflow": "reject", "overflow_stride": "0",
                "embtrt.dim": str(r.hidden), "pooler": "fused", "normalize": "true", "dimensions": "",
                "vlm_image_token": r.image_token, "vlm_image_token_id": str(r.image_token_id),
                "max_batch_size": str(self.spec.max_batch_size)}

    def outputs(self) -> list[dict]:
        return [_t("EMBEDDING", "TYPE_FP32", [self.ref.hidden]), _t("TOKENS", "TYPE_INT64", [1])]

    def gating(self, texts: list[str]) -> str:
        return (f"served vectors vs the model card's computation on {GATE_TEXTS} real texts, 16 seeded images and "
                f"{GATE_TEXTS} texts fused with images")

    def gate(self, ref, params: dict[str, str], encoder, work: Path, texts: list[str]) -> dict:
        import shutil

        from transformers.image_utils import load_image

        from embtrt_backend.kinds.vlm.core import VlmCore

        hf = work / "1" / "hf"   # the front door reads its model folder's tokenizer and image processor
        if not hf.exists():
            shutil.copytree(self.spec.model_dir, hf, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
        core = VlmCore.from_folder(str(work / "1"), params)
        short = [t for t in texts if len(t) < 300][:GATE_TEXTS]
        files = [f for f, _ in gate_images()]
        fused = files[:len(short)]
        requests = [core.prepare(short, None, {}), core.prepare(None, files, {}), core.prepare(short[:len(fused)], fused, {})]
        outs = core.run(requests, encoder)
        for o in outs:
            if o.error is not None:
                raise o.error
        pics = [load_image(data_uri(f, "png")) for f in files]
        want = [embed(ref, [(t, None) for t in short]), embed(ref, [(None, p) for p in pics]),
                embed(ref, list(zip(short[:len(fused)], pics)))]
        v = judge(dict(zip(GROUPS, (o.vectors for o in outs))), dict(zip(GROUPS, want)), self.spec.precision)
        for line in v.lines:
            self.log(line)
        return v.as_dict(lines=False)

    def manifest_fields(self) -> dict:
        return {"pooling": "last-token", "pooler": "fused"}


build_vlm_in = VlmBuild.build_in


def spec_fields(model_dir: Path, max_seq_length: int | None, bucket_t: tuple[int, ...] | None, trust_remote_code: bool,
                overrides: dict[str, str], default_prompt: str | None, default_name: str | None) -> dict:
    """A VLM embedder's spec fields: the input length and its buckets (the static shapes of runs of texts on CUDA), its
    width; no prompts (an instruction per request)."""
    if overrides or default_prompt is not None:
        raise SpecError("a VLM embedder takes no prompts: its instruction is a request parameter", "leave --prompt out")
    ref = load_reference(model_dir, trust_remote_code)
    seq = max_seq_length or min(ref.max_length, DEFAULT_TOKENS)
    if seq > ref.max_length:
        raise SpecError(f"--max-seq-length {seq}: the model takes at most {ref.max_length} positions",
                        f"give at most {ref.max_length}")
    return dict(kind=VLM.name, max_seq_length=seq, buckets=one_input_buckets(bucket_t, seq), hidden_size=ref.hidden,
                input_names=("input_ids", "attention_mask", "mm_token_type_ids"), pooling="last-token", normalize=True,
                pooler="fused",
                prompts=(), default_prompt_name=None, overflow_stride=0)
