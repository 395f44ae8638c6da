"""A page-image retriever's folder and its reference (#70): a ColPali-style folder (config.json's architecture
ColPaliForRetrieval, saved by transformers or by sentence-transformers' MultiVectorEncoder, whose files are the
same plus its modules) or a ColQwen2 one (ColQwen2ForRetrieval), read by transformers' class with its processor
(ColPaliProcessor, ColQwen2Processor) on the PIL image backend (the one the front door's preprocessing equals;
torchvision's resizes differently). The reference's vectors are `model(**processor(...)).embeddings` at the attended
positions: what MultiVectorEncoder's encode_query / encode_document return, and what score_retrieval scores (its zero
rows add nothing).

ColQwen2: transformers' ColQwen2ForRetrieval is followed, not colpali-engine's ColQwen2. transformers' class scatters
the image features into the input embeddings itself and calls the Qwen2-VL model without the image grid, so every
position is numbered 0..n-1 along the row (1-D, as plain text); colpali-engine's passes the grid and gets Qwen2-VL's
3-D M-RoPE positions for the image tokens. They give different vectors for a page (the same for a query: no image).
embtrt serves transformers' computation because it is the reference library's and the one a user comparing against
transformers gets; docs/visual-documents.md says so."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...common.files import json_object
from ...errors import ModelError

ARCHITECTURES = ("ColPaliForRetrieval", "ColQwen2ForRetrieval")
FAMILIES = {"ColPaliForRetrieval": "paligemma", "ColQwen2ForRetrieval": "qwen2"}
NOT_YET = ("ColQwen2_5ForRetrieval",)   # no transformers class
BATCH = 8


def architecture(path: Path) -> str:
    cfg = json_object(Path(path) / "config.json")
    return next((a for a in cfg.get("architectures") or [] if isinstance(a, str)), "")


def pages_rule(path: Path) -> tuple[bool, str]:
    """The registry's rule: a folder whose config.json names ColPaliForRetrieval."""
    arch = architecture(path)
    if arch in ARCHITECTURES:
        return True, f"config.json names {arch}"
    return False, f"config.json names {arch or 'no architecture'}, not {' or '.join(ARCHITECTURES)}"


@dataclass(frozen=True)
class PagesInfo:
    dim: int                        # a token vector's width (embedding_dim)
    image_size: tuple[int, int]     # (height, width) every page is resized to (qwen2: the largest, max_pixels' square)
    image_tokens: int               # image_seq_length (qwen2: the most an image takes)
    image_ids: tuple[int, ...]      # an image's whole sequence (qwen2: none, each image's its own)
    query_prefix: str               # "<bos>Question: "
    query_suffix: str               # the augmentation tokens and "\n"
    max_length: int                 # the text model's positions
    processor: dict                 # the image processor's settings (image_processor.json)
    family: str = "paligemma"       # paligemma | qwen2
    image_prompt: str = ""          # qwen2: the visual prompt, its image token once
    image_token: str = ""
    pixel_shape: tuple[int, ...] = ()   # paligemma: a page's pixel_values per row (3, H, W)


@dataclass
class PagesReference:
    model: Any
    processor: Any

    @property
    def tokenizer(self):
        return self.processor.tokenizer


def load_reference(path: Path, trust_remote_code: bool = False) -> PagesReference:
    import torch
    from transformers import AutoModelForPreTraining, AutoProcessor

    arch = architecture(path)
    if arch in NOT_YET:
        raise ModelError(f"{path} is a {arch}: transformers has no class of it, so there is no reference to gate against "
                         "(embtrt serves ColPaliForRetrieval and ColQwen2ForRetrieval)",
                         "build a ColPaliForRetrieval or ColQwen2ForRetrieval folder")
    if arch not in ARCHITECTURES:
        raise ModelError(f"{path} is not a page-image retriever (config.json names {arch or 'no architecture'})",
                         "point at a ColPaliForRetrieval or ColQwen2ForRetrieval folder")
    processor = AutoProcessor.from_pretrained(str(path), backend="pil", trust_remote_code=trust_remote_code)
    model = AutoModelForPreTraining.from_pretrained(str(path), dtype=torch.float32,
                                                    trust_remote_code=trust_remote_code).eval()
    return PagesReference(model, processor)


def info_of(ref: PagesReference) -> PagesInfo:
    from PIL import Image

    p, tok = ref.processor, ref.processor.tokenizer
    improc = {k: v for k, v in p.image_processor.to_dict().items() if not k.startswith("_")}
    if FAMILIES.get(type(ref.model).__name__) == "qwen2":
        ip = p.image_processor
        top = int(getattr(ip, "max_pixels", None) or ip.size["longest_edge"])   # transformers 5 keeps it as size's longest_edge
        most = top // (int(ip.patch_size) * int(ip.merge_size)) ** 2
        side = int(top ** 0.5)
        return PagesInfo(dim=int(ref.model.config.embedding_dim), image_size=(side, side), image_tokens=most, image_ids=(),
                         query_prefix=p.query_prefix, query_suffix=f"{p.query_augmentation_token * 10}\n",
                         max_length=int(ref.model.config.vlm_config.text_config.max_position_embeddings), processor=improc,
                         family="qwen2", image_prompt=p.visual_prompt_prefix, image_token=p.image_token)
    size = improc["size"]
    probe = p(images=[Image.new("RGB", (8, 8))], return_tensors="pt")
    ids = probe["input_ids"][0].tolist()
    text = ref.model.config.vlm_config.text_config
    return PagesInfo(dim=int(ref.model.config.embedding_dim), image_size=(int(size["height"]), int(size["width"])),
                     image_tokens=int(p.image_seq_length), image_ids=tuple(int(i) for i in ids),
                     query_prefix=f"{tok.bos_token}{p.query_prefix}", query_suffix=f"{p.query_augmentation_token * 10}\n",
                     max_length=int(text.max_position_embeddings), processor=improc,
                     pixel_shape=tuple(int(x) for x in probe["pixel_values"].shape[1:]))


def _vectors(ref: PagesReference, batch) -> list[np.ndarray]:
    import torch

    with torch.inference_mode():
        emb = ref.model(**batch).embeddings.float().numpy()
    mask = batch["attention_mask"].numpy().astype(bool)
    return [emb[i][mask[i]] for i in range(len(emb))]


def encode_queries(ref: PagesReference, texts: list[str]) -> list[np.ndarray]:
    """Each query's [count, dim] vectors: the model on processor(text=...) (process_queries), attended positions."""
    out: list[np.ndarray] = []
    for a in range(0, len(texts), BATCH):
        out += _vectors(ref, ref.processor(text=texts[a:a + BATCH], return_tensors="pt"))
    return out


def encode_images(ref: PagesReference, images: list) -> list[np.ndarray]:
    """Each PIL image's [count, dim] vectors: the model on processor(images=...) (process_images)."""
    out: list[np.ndarray] = []
    for a in range(0, len(images), BATCH):
        batch = ref.processor(images=images[a:a + BATCH], return_tensors="pt")
        batch.pop("labels", None)
        out += _vectors(ref, batch)
    return out


def score(ref: PagesReference, queries: list[np.ndarray], pages: list[np.ndarray]) -> np.ndarray:
    """processor.score_retrieval of the vectors, each page scored alone: [queries, pages] MaxSim, float32.
    score_retrieval pads the pages of one call to the longest with zero vectors, and a query token whose every
    similarity with a shorter page is negative then takes 0 as its max: a ColQwen2 page's score would depend on the
    pages beside it (ColPali's pages are all one length). Alone, a page is scored over its own vectors only (a padded
    query's zero rows add nothing)."""
    import torch

    q = [torch.from_numpy(x) for x in queries]
    cols = [ref.processor.score_retrieval(q, [torch.from_numpy(d)]).float().numpy() for d in pages]
    return np.concatenate(cols, axis=1) if cols else np.zeros((len(queries), 0), np.float32)
