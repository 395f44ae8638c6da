"""A tiny seeded CLIP-style model (#53), built offline: a BPE tokenizer trained on the bundled corpus with
CLIP's special tokens and end-of-word suffix, a CLIPModel (text and vision towers of width 32, patch 32 on
224 x 224 images, projection 16, initializer spread so that inputs are told apart) and its processor with
the PIL image backend, saved as transformers saves it and as sentence-transformers saves it (one
multimodal Transformer module: `modalities == ["text", "image"]`)."""

from __future__ import annotations

import io
import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np


# (text tower, vision tower, projection) widths, layers, heads and MLP sizes; "vit-b-32": openai/clip-vit-base-patch32's
# shape (speed depends on the shape, not the weights: the image benchmark's model)
SHAPES = {"tiny": (dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2),
                   dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2), 16, 0.2),
          "vit-b-32": (dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8),
                       dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12), 512, 0.02)}


def make_clip(path: Path, shape: str = "tiny") -> Path:
    import torch
    from sentence_transformers import SentenceTransformer
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import CLIPConfig, CLIPModel, CLIPProcessor, CLIPTextConfig, CLIPTokenizerFast, CLIPVisionConfig
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    from tiny_models import _corpus, _train

    hf = path.with_name(path.name + "-hf")
    hf.mkdir(parents=True, exist_ok=True)
    specials = ["<|startoftext|>", "<|endoftext|>"]
    tok = _train(models.BPE(unk_token=specials[1], end_of_word_suffix="</w>"),
                 trainers.BpeTrainer(vocab_size=1000, special_tokens=specials, end_of_word_suffix="</w>"),
                 pre_tokenizers.Whitespace(), decoders.BPEDecoder(suffix="</w>"), _corpus())
    tok.normalizer = normalizers.Lowercase()
    bos, eos = (tok.token_to_id(t) for t in specials)
    tok.post_processor = processors.TemplateProcessing(single=f"{specials[0]} $A {specials[1]}",
                                                       special_tokens=[(specials[0], bos), (specials[1], eos)])
    tok.save(str(hf / "_tok.json"))
    fast = CLIPTokenizerFast(tokenizer_file=str(hf / "_tok.json"), bos_token=specials[0], eos_token=specials[1],
                             unk_token=specials[1], pad_token=specials[1], model_max_length=77)
    (hf / "_tok.json").unlink()
    torch.manual_seed(11)
    t, v, proj, spread = SHAPES[shape]
    text = CLIPTextConfig(vocab_size=tok.get_vocab_size(), **t, max_position_embeddings=77, bos_token_id=bos,
                          eos_token_id=eos, pad_token_id=eos, initializer_range=spread)
    vision = CLIPVisionConfig(**v, image_size=224, patch_size=32, initializer_range=spread)
    CLIPModel(CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=proj)).eval().save_pretrained(hf)
    CLIPProcessor(image_processor=CLIPImageProcessorPil(), tokenizer=fast).save_pretrained(hf)
    SentenceTransformer(str(hf), device="cpu").save(str(path))
    shutil.rmtree(hf)
    return path


def make_old_clip(path: Path, clip: Path) -> Path:
    """The tiny CLIP in the old sentence-transformers layout: one `sentence_transformers.models.CLIPModel` module
    whose Hugging Face files sit in its folder (0_CLIPModel/), as Hub folders such as clip-ViT-B-32 keep them."""
    sub = path / "0_CLIPModel"
    sub.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "processor_config.json"):
        shutil.copy(clip / f, sub / f)
    (path / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "0_CLIPModel",
                                                    "type": "sentence_transformers.models.CLIPModel"}]))
    return path


def pattern(w: int, h: int, seed: int) -> np.ndarray:
    """A seeded [h, w, 3] uint8 image with structure (gradients and noise): resizing and cropping show in it."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 3) % 256], -1)
    return np.clip(base + rng.integers(-40, 40, (h, w, 3)), 0, 255).astype(np.uint8)


def encoded_form(kind: str) -> bytes:
    """An encoded image of one of FORMS (seeded)."""
    from PIL import Image

    buf = io.BytesIO()
    rgb = Image.fromarray(pattern(317, 211, 1))
    if kind == "jpeg-exif":
        exif = Image.Exif()
        exif[0x0112] = 6   # rotate 90 degrees on display
        rgb.save(buf, "JPEG", quality=90, exif=exif.tobytes())
    elif kind == "png":
        rgb.save(buf, "PNG")
    elif kind == "webp":
        rgb.save(buf, "WEBP", quality=90)
    elif kind == "gif-animated":
        frames = [Image.fromarray(pattern(180, 260, s)).convert("P") for s in (2, 3, 4)]
        frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=50)
    elif kind == "grayscale":
        Image.fromarray(pattern(400, 300, 5)[..., 0]).save(buf, "PNG")
    elif kind == "rgba":
        a = np.dstack([pattern(250, 250, 6), (np.arange(250 * 250).reshape(250, 250) % 256).astype(np.uint8)])
        Image.fromarray(a, "RGBA").save(buf, "PNG")
    elif kind == "palette-transparent":
        p = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
        p.save(buf, "PNG", transparency=3)
    elif kind == "png-16bit":
        Image.fromarray((pattern(300, 200, 7)[..., 1].astype(np.uint16) * 257)).save(buf, "PNG")
    elif kind == "small":
        Image.fromarray(pattern(100, 50, 8)).save(buf, "PNG")
    elif kind == "mpo":   # a camera JPEG with a multi-picture header (Pillow opens it as MPO): its first picture
        Image.fromarray(pattern(260, 190, 10)).save(buf, "MPO", save_all=True, append_images=[rgb])
    elif kind == "tall":
        Image.fromarray(pattern(225, 999, 9)).save(buf, "PNG")
    else:
        raise ValueError(kind)
    return buf.getvalue()


FORMS = ("jpeg-exif", "png", "webp", "gif-animated", "grayscale", "rgba", "palette-transparent", "png-16bit", "small", "tall",
         "mpo")



def png_header_only(w: int, h: int) -> bytes:
    """A PNG whose header claims w x h pixels (a decompression bomb's first bytes)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


def hostile_images(good: bytes, thin: bool = True) -> dict[bytes, str]:
    """Files a front door that decodes images must refuse, each sent as row 1 beside `good`, and what its refusal
    says: not an image, truncated, a format not decoded, a header over the pixel limit, an empty item; `thin`: a 600 x 2
    PNG, past a dynamic-resolution processor's aspect ratio (Qwen2-VL's: 200)."""
    from PIL import Image

    def encoded(w: int, h: int, fmt: str) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(pattern(w, h, 1)).save(buf, fmt)
        return buf.getvalue()

    cases = {b"plain text, not an image": "row 1: not an image", good[:len(good) // 2]: "row 1: the image file is truncated",
             encoded(20, 20, "TIFF"): "row 1: image format TIFF is not decoded",
             png_header_only(8000, 8000): "row 1: the image is 8000 x 8000 pixels, over the limit of 36000000",
             b"": "row 1: an empty image"}
    if thin:
        cases[encoded(600, 2, "PNG")] = "row 1: the image processor refuses it: absolute aspect ratio must be smaller than 200"
    return cases
