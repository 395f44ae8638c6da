"""A page-image retriever's folder and its reference (#70): a ColPali-style folder (config.json's architecture
ColPaliForRetrieval, saved by transformers or by sentence-transformers' MultiVectorEncoder, whose files are the
same plus its modules), read by transformers' ColPaliForRetrieval with its ColPaliProcessor on the PIL image
backend (the one the front door's preprocessing equals; torchvision's resizes differently). The reference's
vectors are `model(**processor(...)).embeddings` at the attended positions: what MultiVectorEncoder's
encode_query / encode_document return, and what score_retrieval scores (its zero rows add nothing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...common.files import json_object
from ...errors import ModelError

ARCHITECTURES = ("ColPaliForRetrieval",)
NOT_YET = ("ColQwen2ForRetrieval", "ColQwen2_5ForRetrieval")   # position ids differ from colpali-engine's: not served yet
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
    image_size: tuple[int, int]     # (height, width) every page is resized to
    image_tokens: int               # image_seq_length
    image_ids: tuple[int, ...]      # an image's whole sequence
    query_prefix: str               # "<bos>Question: "
    query_suffix: str               # the augmentation tokens and "\n"
    max_length: int                 # the text model's positions
    processor: dict                 # the image processor's settings (image_processor.json)


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
        raise ModelError(f"{path} is a {arch}: ColQwen-style page-image retrievers are not served yet (transformers' class "
                         "and colpali-engine place image positions differently; embtrt serves ColPaliForRetrieval)",
                         "build a ColPaliForRetrieval folder")
    if arch not in ARCHITECTURES:
        raise ModelError(f"{path} is not a page-image retriever (config.json names {arch or 'no architecture'})",
                         "point at a ColPaliForRetrieval folder")
    processor = AutoProcessor.from_pretrained(str(path), backend="pil", trust_remote_code=trust_remote_code)
    model = AutoModelForPreTraining.from_pretrained(str(path), dtype=torch.float32,
                                                    trust_remote_code=trust_remote_code).eval()
    return PagesReference(model, processor)


def info_of(ref: PagesReference) -> PagesInfo:
    from PIL import Image

    p, tok = ref.processor, ref.processor.tokenizer
    improc = {k: v for k, v in p.image_processor.to_dict().items() if not k.startswith("_")}
    size = improc["size"]
    ids = p(images=[Image.new("RGB", (8, 8))])["input_ids"][0]
    text = ref.model.config.vlm_config.text_config
    return PagesInfo(dim=int(ref.model.config.embedding_dim), image_size=(int(size["height"]), int(size["width"])),
                     image_tokens=int(p.image_seq_length), image_ids=tuple(int(i) for i in ids),
                     query_prefix=f"{tok.bos_token}{p.query_prefix}", query_suffix=f"{p.query_augmentation_token * 10}\n",
                     max_length=int(text.max_position_embeddings), processor=improc)


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
    """processor.score_retrieval of the vectors: [queries, pages] MaxSim, float32."""
    import torch

    s = ref.processor.score_retrieval([torch.from_numpy(q) for q in queries], [torch.from_numpy(d) for d in pages])
    return s.float().numpy()
