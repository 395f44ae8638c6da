"""A tiny seeded Qwen3-VL-Embedding-shaped model (#70 item 2), built offline: a byte-level BPE trained on the bundled
corpus with Qwen's special tokens and a Qwen-style chat template, Qwen2-VL's PIL image processor (patch 16, merge 2:
an image of H x W pixels, resized to multiples of 32 within 4 to 16 merged patches, gives (H/32)(W/32) tokens), and a
Qwen3VLModel (text and vision width 32, 2 layers, M-RoPE) saved as transformers saves it, with the
sentence-transformers modules of the model card (a Transformer, last-token Pooling, Normalize) beside it.

`reference_embed` is the model card's computation, written here with transformers: each input as a conversation
(the instruction as the system message; the user's image and / or text), the chat template with the generation
prompt, Qwen3VLProcessor (its video processor needs torchvision, absent here: built without it), the model's last
hidden state at the last attended position, L2-normalised."""

from __future__ import annotations

import json
from pathlib import Path

INSTRUCTION = "Represent the user's input."
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>"]
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
            "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
            "{% for c in message['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
            "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


# the model's shape: "tiny" (the tests': width 32, 2 layers, 4 to 16 image tokens) or "small" (the bench's: width 256,
# 4 layers, up to 256 image tokens; speed depends on the shape, not the weights)
SHAPES = {"tiny": dict(width=32, layers=2, heads=2, kv=1, head_dim=16, mrope=[2, 3, 3], max_tokens=16),
          "small": dict(width=256, layers=4, heads=4, kv=2, head_dim=64, mrope=[12, 10, 10], max_tokens=256)}


def make_vlm(path: Path, shape: str = "tiny") -> Path:
    import torch
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3VLConfig, Qwen3VLModel
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from tiny_models import _corpus, _train

    tok = _train(models.BPE(), trainers.BpeTrainer(vocab_size=1000, special_tokens=SPECIALS,
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
                 pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel(), _corpus())
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                   padding_side="right", model_max_length=1024)
    fast.chat_template = TEMPLATE
    ids = {t: fast.convert_tokens_to_ids(t) for t in SPECIALS}
    z = SHAPES[shape]
    w = z["width"]
    images = Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32 * 4,
                                      max_pixels=32 * 32 * z["max_tokens"], image_mean=[0.5] * 3, image_std=[0.5] * 3)
    torch.manual_seed(41)
    text = dict(vocab_size=len(fast), hidden_size=w, intermediate_size=2 * w, num_hidden_layers=z["layers"],
                num_attention_heads=z["heads"], num_key_value_heads=z["kv"], head_dim=z["head_dim"],
                max_position_embeddings=1024, initializer_range=0.2,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": z["mrope"],
                                 "mrope_interleaved": True}, pad_token_id=ids["<|endoftext|>"])
    vision = dict(depth=z["layers"], hidden_size=w, intermediate_size=2 * w, num_heads=z["heads"], patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=w, num_position_embeddings=64,
                  deepstack_visual_indexes=[0], initializer_range=0.2)
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                        video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                        vision_end_token_id=ids["<|vision_end|>"])
    Qwen3VLModel(cfg).eval().save_pretrained(path)
    fast.save_pretrained(path)
    images.save_pretrained(path)
    (path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.sentence_transformer.modules.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.base.modules.Normalize"}]))
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": w, "pooling_mode": "lasttoken"}))
    (path / "2_Normalize").mkdir()
    (path / "sentence_bert_config.json").write_text(json.dumps({
        "transformer_task": "feature-extraction", "module_output_name": "token_embeddings", "message_format": "structured",
        "processing_kwargs": {"chat_template": {"add_generation_prompt": True}}, "architecture": "Qwen3VLModel",
        "modality_config": {m: {"method": "forward", "method_output_name": "last_hidden_state"}
                            for m in ("text", "image", "message")}}))
    return path


def reference_embed(path: Path, items: list[tuple[str | None, object]], instruction: str = INSTRUCTION):
    """Each (text or None, PIL image or None) input's vector, as the model card computes it (one batch, right-padded)."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer, Qwen3VLModel, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    class NoVideoProcessor(Qwen3VLProcessor):   # Qwen3VLProcessor's video processor needs torchvision
        def check_argument_for_proper_class(self, name, argument):
            return None

    tok = AutoTokenizer.from_pretrained(str(path))
    proc = NoVideoProcessor(image_processor=Qwen2VLImageProcessorPil.from_pretrained(str(path)), tokenizer=tok,
                            video_processor=None, chat_template=tok.chat_template)
    model = Qwen3VLModel.from_pretrained(str(path)).eval()
    convs = [[{"role": "system", "content": [{"type": "text", "text": instruction}]},
              {"role": "user", "content": ([{"type": "image", "image": image}] if image is not None else [])
               + ([{"type": "text", "text": text}] if text is not None else [])}] for text, image in items]
    prompts = proc.apply_chat_template(convs, add_generation_prompt=True, tokenize=False)
    pictures = [image for _, image in items if image is not None]
    batch = proc(text=prompts, images=pictures or None, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"]
    last = mask.sum(dim=1) - 1
    out = torch.nn.functional.normalize(hidden[torch.arange(len(items)), last], p=2, dim=-1)
    return np.asarray(out.float().numpy(), np.float32)
