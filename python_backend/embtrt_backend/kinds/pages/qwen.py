"""A ColQwen2-style page-image retriever's images (ColQwen2ForRetrieval, as transformers' ColQwen2Processor feeds it):
each image decoded and bounded as every image kind's (embtrt_backend.images), then the model's Qwen2-VL image
processor on its PIL backend (dynamic resolution: resized to multiples of patch x merge within its min and max pixels,
so an image's token count follows its size, at most max_pixels / (patch x merge)^2) -> its patches and grid (t, h, w);
its sequence the processor's visual prompt with the image pad token repeated once per merged patch.

Several requests' images run together in runs of at most max_batch: sequences right-padded (the model is causal and
transformers' class numbers positions 0..n-1 along the row, so a right-padded row equals the row alone), patches
zero-padded to the longest image's as the processor pads them, the grids beside them. Every attended position's vector
is the image's (what the processor's attention mask keeps)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ...image_core import dynamic_patches, read_images
from ...images import ImageLimits


@dataclass
class QwenImage:
    ids: np.ndarray       # its sequence
    pixels: np.ndarray    # [patches, patch dim]
    grid: np.ndarray      # [3]: t, h, w


@dataclass
class QwenImages:
    rows: list[QwenImage]


class QwenPages:
    def __init__(self, processor, tokenizer, prompt: str, image_token: str, pad_id: int, limits: ImageLimits,
                 max_batch: int) -> None:
        self.processor, self.tokenizer, self.prompt, self.image_token = processor, tokenizer, prompt, image_token
        self.pad_id, self.limits, self.max_batch = pad_id, limits, max(1, max_batch)
        self.merge = int(getattr(processor, "merge_size", 2))

    @classmethod
    def from_folder(cls, folder: str, p: dict[str, str], tokenizer) -> "QwenPages":
        from transformers import AutoImageProcessor

        limits = ImageLimits.from_parameters(p)
        processor = AutoImageProcessor.from_pretrained(os.path.join(folder, "hf"), backend="pil")
        return cls(processor, tokenizer, p["pages_image_prompt"], p["pages_image_token"], int(p["pad_id"]), limits,
                   int(p.get("image_max_batch", "8")))

    def max_tokens(self) -> int:
        """The most positions an image's sequence takes: the visual prompt with the most image tokens the processor
        gives (its max_pixels)."""
        p = self.processor   # transformers 5 keeps max_pixels as size's longest_edge
        most = int(getattr(p, "max_pixels", None) or p.size["longest_edge"]) // (int(p.patch_size) * self.merge) ** 2
        return len(self.tokenizer.encode(self.prompt.replace(self.image_token, self.image_token * most, 1)).ids)

    def one(self, img, row: int) -> QwenImage:
        pixels, grid = dynamic_patches(self.processor, img, row)
        n = int(np.prod(grid)) // self.merge ** 2
        ids = np.asarray(self.tokenizer.encode(self.prompt.replace(self.image_token, self.image_token * n, 1)).ids, np.int64)
        return QwenImage(ids, pixels, grid)

    def prepare(self, files: list[bytes]) -> QwenImages:
        """A request's encoded files -> its images (image_core.read_images: every header read and bounded first, as
        the image kind's), the first bad file's InputError (by row) refusing the request."""
        return QwenImages(read_images(files, self.limits, self.one))

    def run(self, rows: list[QwenImage], encode, bucket: int) -> list[np.ndarray]:
        """Every image's [positions, dim] vectors, in runs of at most max_batch."""
        out: list[np.ndarray] = []
        for a in range(0, len(rows), self.max_batch):
            chunk = rows[a:a + self.max_batch]
            width = max(len(r.ids) for r in chunk)
            ids = np.full((len(chunk), width), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            patches = np.zeros((len(chunk), max(len(r.pixels) for r in chunk), chunk[0].pixels.shape[1]), np.float32)
            for i, r in enumerate(chunk):
                ids[i, :len(r.ids)], mask[i, :len(r.ids)], patches[i, :len(r.pixels)] = r.ids, 1, r.pixels
            emb = np.asarray(encode(bucket, {"input_ids": ids, "attention_mask": mask, "pixel_values": patches,
                                             "image_grid_thw": np.stack([r.grid for r in chunk])}), dtype=np.float32)
            out += [emb[i, :len(r.ids)] for i, r in enumerate(chunk)]
        return out
