"""A text-and-image embedder's folder and its reference: a sentence-transformers folder whose model has a
text and an image tower (CLIP-style: one multimodal Transformer module, `modalities` text and image; or an
old `sentence_transformers.models.CLIPModel` module folder, its Hugging Face files in the module's folder),
read by `SentenceTransformer`, whose `encode` is the reference for texts and for images given as data URIs
(transformers' load_image: EXIF orientation, RGB), the path the served images follow.

The gate's images are made here, seeded: drawn shapes and gradients on noise in sizes from 40 to 400
pixels a side, as PNG, JPEG, WebP and GIF, an RGBA and a grayscale one among them."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import ModelError

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


def data_uri(data: bytes, fmt: str) -> str:
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(data).decode("ascii")


def gate_images(count: int = 16, seed: int = 53) -> list[tuple[bytes, str]]:
    """`count` seeded images as encoded files (bytes, format), each different in content, size and format."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    formats = ("PNG", "JPEG", "WEBP", "GIF")
    out = []
    for i in range(count):
        w, h = int(rng.integers(40, 400)), int(rng.integers(40, 400))
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(xx * rng.uniform(0.2, 2) + yy * rng.uniform(0, 1)) % 256,
                         (yy * rng.uniform(0.2, 2)) % 256, np.full((h, w), rng.uniform(0, 255))], -1)
        noisy = np.clip(base + rng.normal(0, 24, base.shape), 0, 255).astype(np.uint8)
        img = Image.fromarray(noisy, "RGB")
        draw = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(1, 5))):
            x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
            box = (x0, y0, x0 + int(rng.integers(5, w)), y0 + int(rng.integers(5, h)))
            fill = tuple(int(c) for c in rng.integers(0, 256, 3))
            (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=fill)
        fmt = formats[i % len(formats)]
        if i == 5:
            img = img.convert("L")
        if i == 6:
            fmt, img = "PNG", img.convert("RGBA")
            img.putalpha(Image.fromarray((np.arange(w)[None, :].repeat(h, 0) * 255 // max(1, w - 1)).astype(np.uint8)))
        buf = io.BytesIO()
        img.save(buf, format=fmt, **({"quality": 90} if fmt in ("JPEG", "WEBP") else {}))
        out.append((buf.getvalue(), fmt))
    return out
