"""A text-and-image embedder's folder and its reference: a sentence-transformers folder whose model has a
text and an image tower (CLIP-style: one multimodal Transformer module, `modalities` text and image; or an
old `sentence_transformers.models.CLIPModel` module folder, its Hugging Face files in the module's folder),
read by `SentenceTransformer`, whose `encode` is the reference for texts and for images given as data URIs
(transformers' load_image: EXIF orientation, RGB), the path the served images follow.

The gate's images are the image input's seeded ones (embtrt.reference.images)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import ModelError
from ...reference.images import data_uri, gate_images  # noqa: F401 (the image input's, shared)

OLD_MODULE = "sentence_transformers.models.CLIPModel"


def _modules(path: Path) -> list[dict]:
    try:
        doc = json.loads((Path(path) / "modules.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    return doc if isinstance(doc, list) else []


def hf_subdir(path: Path) -> str | None:
    """The folder (relative) of a text-and-image model's Hugging Face files: "" for a multimodal Transformer
    module at the root, the module's path for an old CLIPModel module; None for a folder of another kind."""
    mods = _modules(path)
    if not mods or not isinstance(mods[0], dict):
        return None
    first = mods[0]
    if first.get("type") == OLD_MODULE or str(first.get("type", "")).endswith(".clip_model.CLIPModel"):
        return str(first.get("path", ""))
    try:
        cfg = json.loads((Path(path) / str(first.get("path", "")) / "sentence_bert_config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    modalities = cfg.get("modality_config") if isinstance(cfg, dict) else None
    if isinstance(modalities, dict) and {"text", "image"} <= set(modalities):
        return str(first.get("path", ""))
    return None


def is_multimodal(path: Path) -> bool:
    return hf_subdir(path) is not None


def text_and_image_rule(path: Path) -> tuple[bool, str]:
    """Detection (embtrt_backend.kinds.DETECTION): a text-and-image sentence-transformers folder."""
    if is_multimodal(path):
        return True, "a sentence-transformers folder whose model encodes texts and images (CLIP-style)"
    return False, "its first module is neither a CLIPModel nor a Transformer with text and image modalities"


@dataclass(frozen=True)
class MultimodalInfo:
    hf_dir: str                   # the Hugging Face files' folder, relative to the model folder
    dim: int                      # the projection's width: every vector
    max_length: int               # the text tower's tokens
    image_size: tuple[int, int]   # (height, width) of pixel_values
    processor: dict               # the image processor's settings (embtrt_backend.images.ProcessorConfig)
    prompts: dict
    default_prompt_name: str | None


def load_reference(path: Path, trust_remote_code: bool = False):
    import transformers
    from sentence_transformers import SentenceTransformer

    if int(transformers.__version__.split(".")[0]) < 5:   # the PIL image backend as a class of its own, and its pin
        raise ModelError(f"a text-and-image model needs transformers 5 or later (this is {transformers.__version__}): "
                         "its image processor's PIL backend is what the front door reproduces",
                         "pip install 'transformers>=5'")
    # the PIL image backend pinned: where torchvision is installed transformers would pick its processor, which
    # resizes differently (antialiasing); the served preprocessing is the PIL backend's
    model = SentenceTransformer(str(path), device="cpu", trust_remote_code=trust_remote_code,
                                processor_kwargs={"backend": "pil"})
    if not {"text", "image"} <= set(getattr(model, "modalities", ()) or ()):
        raise ModelError(f"{path} does not encode both texts and images (modalities {getattr(model, 'modalities', None)})",
                         "point at a CLIP-style sentence-transformers folder")
    return model


def info_of(model, path: Path) -> MultimodalInfo:
    from embtrt_backend.images import ProcessorConfig

    mod = model[0]
    proc = mod.processor.image_processor
    if not type(proc).__name__.endswith("Pil"):
        raise ModelError(f"{path}: the image processor {type(proc).__name__} is the torchvision backend, which "
                         "resizes differently", "save the processor with its PIL backend (CLIPImageProcessorPil)")
    settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in proc.to_dict().items()
                if k in ("size", "crop_size", "resample", "rescale_factor", "image_mean", "image_std", "do_resize",
                         "do_center_crop", "do_rescale", "do_normalize")}
    try:
        cfg = ProcessorConfig.from_dict(settings)
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{path}: the image processor is not served ({exc})", "a CLIP-style processor "
                         "(shortest-edge resize, center crop) is served") from None
    if not (cfg.do_resize and cfg.do_center_crop):   # every image the same size: the tower's fixed input
        raise ModelError(f"{path}: the image processor has do_resize {cfg.do_resize}, do_center_crop {cfg.do_center_crop}: "
                         "images of different sizes cannot share the image tower's fixed input",
                         "a CLIP-style processor (shortest-edge resize and center crop) is served")
    hf_dir = hf_subdir(path) or ""
    dim = int(mod.model.config.projection_dim)
    return MultimodalInfo(hf_dir, dim, int(model.max_seq_length), cfg.crop, settings, dict(model.prompts or {}),
                          model.default_prompt_name)


def encode_texts(model, texts: list[str], prompt_name: str | None = None) -> np.ndarray:
    return np.asarray(model.encode(texts, prompt_name=prompt_name, batch_size=16, convert_to_numpy=True), np.float32)


def encode_images(model, uris: list[str]) -> np.ndarray:
    """SentenceTransformer.encode of images given as data URIs (its load_image path)."""
    return np.asarray(model.encode(uris, batch_size=16, convert_to_numpy=True), np.float32)
