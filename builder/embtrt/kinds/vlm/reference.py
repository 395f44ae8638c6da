"""A VLM embedder's folder and its reference (#70 item 2): a Qwen3-VL model folder with the model card's
sentence-transformers modules beside it (a Transformer, a Pooling module of last-token pooling, Normalize).
sentence-transformers itself cannot load it here (Qwen3-VL's processor builds a video processor that needs
torchvision), so the reference is the model card's computation with transformers: the conversation through the chat
template with the generation prompt, the image through the model's image processor (PIL backend) and its pad token
expanded per merged patch, the model's last hidden state at the last attended position, L2-normalised, one input at
a time (unpadded: the gate then also judges the served batching and padding)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...common.files import json_object
from ...errors import ModelError

MODEL_TYPES = ("qwen3_vl",)
INSTRUCTION = "Represent the user's input."


def _pooling(path: Path) -> str:
    """The pooling mode of the folder's sentence-transformers Pooling module ("" where it has none)."""
    import json

    try:
        mods = json.loads((Path(path) / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    pool = next((m for m in mods if isinstance(m, dict) and str(m.get("type", "")).endswith("Pooling")), None) \
        if isinstance(mods, list) else None
    if pool is None:
        return ""
    cfg = json_object(Path(path) / str(pool.get("path", "")) / "config.json")
    if cfg.get("pooling_mode") == "lasttoken" or cfg.get("pooling_mode_lasttoken"):
        return "lasttoken"
    return str(cfg.get("pooling_mode") or "other")


def vlm_rule(path: Path) -> tuple[bool, str]:
    """The registry's rule: a Qwen3-VL folder whose sentence-transformers modules pool the last token."""
    cfg = json_object(Path(path) / "config.json")
    kind = str(cfg.get("model_type") or "")
    if kind not in MODEL_TYPES:
        return False, f"config.json's model_type is {kind or 'none'}, not {' or '.join(MODEL_TYPES)}"
    pooling = _pooling(path)
    if pooling != "lasttoken":
        return False, f"a {kind} folder without a last-token Pooling module ({pooling or 'no modules.json'}): not an embedder"
    return True, f"a {kind} folder with sentence-transformers' last-token pooling (a VLM embedder)"


@dataclass
class VlmReference:
    model: Any
    tokenizer: Any
    images: Any
    image_token: str
    image_token_id: int
    hidden: int
    max_length: int

    @property
    def merge(self) -> int:
        return int(getattr(self.images, "merge_size", 2))


def load_reference(path: Path, trust_remote_code: bool = False) -> VlmReference:
    import torch
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    ok, why = vlm_rule(path)
    if not ok:
        raise ModelError(f"{path} is not a VLM embedder: {why}", "point at a Qwen3-VL embedding folder")
    cfg = json_object(Path(path) / "config.json")
    tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    if not tok.chat_template:
        raise ModelError(f"{path}: its tokenizer has no chat template", "a VLM embedder renders its inputs with one")
    token_id = int(cfg["image_token_id"])
    model = AutoModel.from_pretrained(str(path), dtype=torch.float32, trust_remote_code=trust_remote_code).eval()
    text = model.config.text_config
    return VlmReference(model, tok, AutoImageProcessor.from_pretrained(str(path), backend="pil"),
                        str(tok.convert_ids_to_tokens(token_id)), token_id, int(text.hidden_size),
                        int(text.max_position_embeddings))


def embed_one(ref: VlmReference, text: str | None, image, instruction: str = INSTRUCTION) -> np.ndarray:
    """One input (a text, a PIL image, or both) -> its normalised vector, as the model card computes it."""
    import torch

    content = ([{"type": "image"}] if image is not None else []) + ([{"type": "text", "text": text}] if text is not None else [])
    prompt = ref.tokenizer.apply_chat_template([{"role": "system", "content": [{"type": "text", "text": instruction}]},
                                                {"role": "user", "content": content}],
                                               tokenize=False, add_generation_prompt=True)
    feeds: dict = {}
    if image is not None:
        out = ref.images(images=[image], return_tensors="pt")
        n = int(out["image_grid_thw"][0].prod()) // ref.merge ** 2
        prompt = prompt.replace(ref.image_token, ref.image_token * n, 1)
        feeds = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
    ids = torch.tensor([ref.tokenizer(prompt)["input_ids"]])
    with torch.inference_mode():
        hidden = ref.model(input_ids=ids, attention_mask=torch.ones_like(ids),
                           mm_token_type_ids=(ids == ref.image_token_id).to(torch.int64), **feeds).last_hidden_state
    return torch.nn.functional.normalize(hidden[0, -1].float(), p=2, dim=-1).numpy()


def embed(ref: VlmReference, items: list[tuple[str | None, Any]], instruction: str = INSTRUCTION) -> np.ndarray:
    return np.stack([embed_one(ref, t, i, instruction) for t, i in items]).astype(np.float32)
