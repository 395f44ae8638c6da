"""The VLM embedder's request core: inputs (a text, an image, or both fused) -> each one's vector, as the model card
computes it with the model's processor:

- the conversation `[system: the instruction, user: [the image?, the text?]]` rendered by the model's chat template
  with the generation prompt (the tokenizer's own apply_chat_template, in 1/hf/);
- an image decoded and bounded as every image kind's (embtrt_backend.images: format, bytes, pixels, EXIF, RGB),
  then the model's image processor on its PIL backend (dynamic resolution: resized to multiples of patch x merge
  within the processor's min and max pixels) -> its patches and grid (t, h, w); the image pad token in the text
  repeated once per merged patch (t * h * w / merge^2), as the processor expands it;
- tokenized, bounded by max_seq_length (an input over it is refused naming its row: cutting a fused input would
  drop its end, the last token the vector is read at);
- rows of several requests together, right-padded, in runs of at most max_batch rows (runs of texts alone padded to
  the bucket where the encoder has static shapes: CUDA graphs; a run with an image runs eagerly); `mm_token_type_ids`
  1 at the image tokens (the model's 3-D positions need it). The model runs in the encoder (kinds.vlm.torch)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ... import InputError
from ...image_core import dynamic_patches, read_images
from ...images import ImageLimits
from ...options import TRITON_PARAMETERS
from ...routing import fitting_bucket, run_rows

DEFAULT_INSTRUCTION = "Represent the user's input."
KNOWN = ("instruction",)


@dataclass
class Row:
    ids: np.ndarray
    pixels: np.ndarray | None = None   # [patches, patch dim]
    grid: np.ndarray | None = None     # [3]: t, h, w


@dataclass
class VlmRequest:
    rows: list[Row]


@dataclass
class VlmOutcome:
    vectors: np.ndarray | None = None
    tokens: np.ndarray | None = None
    error: Exception | None = None


def instruction_of(params: dict, default: str) -> str:
    unknown = sorted(k for k in params if k not in KNOWN and k not in TRITON_PARAMETERS)
    if unknown:
        raise InputError(f"unknown request parameter {unknown[0]!r}: a VLM embedder takes instruction", unknown[0])
    value = params.get("instruction", default)
    if not isinstance(value, str):
        raise InputError("instruction must be a string", "instruction")
    return value


class VlmCore:
    def __init__(self, tokenizer, images, image_token: str, image_token_id: int, pad_id: int, max_tokens: int,
                 max_batch: int, limits: ImageLimits, instruction: str = DEFAULT_INSTRUCTION,
                 pad_to_bucket: bool = False, buckets: tuple[int, ...] = ()) -> None:
        self.tokenizer, self.images, self.limits, self.pad_to_bucket = tokenizer, images, limits, pad_to_bucket
        self.buckets = tuple(buckets) or (max_tokens,)   # a run of texts on static shapes: the smallest that holds it
        self.image_token, self.image_token_id, self.pad_id = image_token, image_token_id, pad_id
        self.max_tokens, self.max_batch, self.instruction = max_tokens, max(1, max_batch), instruction
        self.merge = int(getattr(images, "merge_size", 2))

    @classmethod
    def from_folder(cls, folder: str, p: dict[str, str]) -> "VlmCore":
        from transformers import AutoImageProcessor, AutoTokenizer

        hf = os.path.join(folder, "hf")
        limits = ImageLimits.from_parameters(p)
        return cls(AutoTokenizer.from_pretrained(hf), AutoImageProcessor.from_pretrained(hf, backend="pil"),
                   p["vlm_image_token"], int(p["vlm_image_token_id"]), int(p["pad_id"]), int(p["max_seq_length"]),
                   run_rows(p, int(p["max_batch_size"])), limits, p.get("vlm_instruction") or DEFAULT_INSTRUCTION,
                   p.get("pad_to_bucket") == "true",
                   tuple(int(x) for x in p.get("buckets", p["max_seq_length"]).split(",")))

    def row(self, text: str | None, image: tuple[np.ndarray, np.ndarray] | None, instruction: str, k: int) -> Row:
        """One input (a text, its image's patches and grid, or both) -> its ids and the image's; an InputError naming
        row k."""
        content = ([{"type": "image"}] if image is not None else []) + \
            ([{"type": "text", "text": text}] if text is not None else [])
        messages = [{"role": "system", "content": [{"type": "text", "text": instruction}]},
                    {"role": "user", "content": content}]
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        pixels = grid = None
        if image is not None:
            pixels, grid = image
            prompt = prompt.replace(self.image_token, self.image_token * int(np.prod(grid) // self.merge ** 2), 1)
        ids = np.asarray(self.tokenizer(prompt)["input_ids"], np.int64)
        if len(ids) > self.max_tokens:
            raise InputError(f"row {k}: the input is {len(ids)} tokens, over this model's {self.max_tokens} (an input is not "
                             "cut: its last token is what its vector is read at)", "input", k)
        return Row(ids, pixels, grid)

    def prepare(self, texts: list[str] | None, files: list[bytes] | None, params: dict) -> VlmRequest:
        instruction = instruction_of(params, self.instruction)
        n = len(texts if texts is not None else files or [])
        # the images read as every image kind's (each header and the request's pixels bounded before any decodes)
        pics = read_images(files, self.limits, lambda img, k: dynamic_patches(self.images, img, k)) if files is not None \
            else None
        return VlmRequest([self.row(texts[k] if texts is not None else None, pics[k] if pics is not None else None,
                                    instruction, k) for k in range(n)])

    def run(self, requests: list[VlmRequest], encode) -> list[VlmOutcome]:
        rows = [r for req in requests for r in req.rows]
        try:
            out = np.concatenate([self._run(rows[a:a + self.max_batch], encode)
                                  for a in range(0, len(rows), self.max_batch)])
        except Exception as exc:  # noqa: BLE001 (each request's INTERNAL error)
            return [VlmOutcome(error=exc) for _ in requests]
        outs, start = [], 0
        for req in requests:
            n = len(req.rows)
            outs.append(VlmOutcome(out[start:start + n], np.asarray([len(r.ids) for r in req.rows], np.int64)))
            start += n
        return outs

    def _run(self, chunk: list[Row], encode) -> np.ndarray:
        pictures = [r for r in chunk if r.pixels is not None]
        # texts alone on static shapes (CUDA graphs) padded to the smallest bucket that holds them; with an image, eager
        width = max(len(r.ids) for r in chunk)
        if self.pad_to_bucket and not pictures:
            width = fitting_bucket(width, self.buckets)
        ids = np.full((len(chunk), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(chunk), width), dtype=np.int64)
        for i, r in enumerate(chunk):
            ids[i, :len(r.ids)], mask[i, :len(r.ids)] = r.ids, 1
        feeds = {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": (ids == self.image_token_id).astype(np.int64)}
        if pictures:
            feeds["pixel_values"] = np.concatenate([r.pixels for r in pictures])
            feeds["image_grid_thw"] = np.stack([r.grid for r in pictures])
        return np.asarray(encode(width if self.pad_to_bucket and not pictures else self.max_tokens, feeds), dtype=np.float32)
