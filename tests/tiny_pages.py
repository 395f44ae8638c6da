"""A tiny seeded ColPali-shaped page-image retriever (#69 item 5, #70 item 1), built offline: a byte-level BPE
trained on the bundled corpus with Gemma's special tokens, ColPaliProcessor over it (it adds `<image>` and the
location tokens) with SigLIP's PIL image processor at 64 x 64 (4 x 4 patches of 16: 16 image tokens), and a
ColPaliForRetrieval of a 2-layer Gemma (width 32) over a 2-layer SigLIP tower, projected to 16-wide token vectors;
initializer spread so that inputs are told apart. Saved as transformers saves it, and (`st`) as
sentence-transformers' MultiVectorEncoder saves it."""

from __future__ import annotations

import shutil
from pathlib import Path

IMAGE, PATCH = 64, 16
# (image size, patch, Gemma / SigLIP width, layers, heads, projection): "tiny" the tests' (16 image tokens); "small" the
# benchmark's (224 / 16: 196 image tokens, width 256, 4 layers; speed depends on the shape, not the weights)
SHAPES = {"tiny": (IMAGE, PATCH, 32, 2, 2, 16), "small": (224, 16, 256, 4, 4, 128)}


def make_colpali(path: Path, st: bool = False, shape: str = "tiny") -> Path:
    import torch
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import (ColPaliConfig, ColPaliForRetrieval, ColPaliProcessor, GemmaConfig, PaliGemmaConfig,
                              PreTrainedTokenizerFast, SiglipVisionConfig)
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    from tiny_models import _corpus, _train

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]   # Gemma's ids 0..3
    tok = _train(models.BPE(unk_token="<unk>"),
                 trainers.BpeTrainer(vocab_size=1000, special_tokens=specials,
                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
                 pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel(), _corpus())
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
                                   unk_token="<unk>", padding_side="right", model_max_length=512)
    size, patch, width, layers, heads, dim = SHAPES[shape]
    images = SiglipImageProcessorPil(size={"height": size, "width": size}, image_seq_length=(size // patch) ** 2)
    proc = ColPaliProcessor(image_processor=images, tokenizer=fast)
    vocab = len(proc.tokenizer)
    torch.manual_seed(21)
    text = GemmaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=1, head_dim=width // heads,
                       max_position_embeddings=256 if shape == "tiny" else 1024, pad_token_id=0, eos_token_id=1,
                       bos_token_id=2, initializer_range=0.2 if shape == "tiny" else 0.02)
    vision = SiglipVisionConfig(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
                                num_attention_heads=heads, image_size=size, patch_size=patch, vision_use_head=False)
    vlm = PaliGemmaConfig(vision_config=vision.to_dict(), text_config=text.to_dict(), image_token_index=proc.image_token_id,
                          vocab_size=vocab, projection_dim=width, hidden_size=width)
    hf = path.with_name(path.name + "-hf") if st else path
    ColPaliForRetrieval(ColPaliConfig(vlm_config=vlm.to_dict(), embedding_dim=dim)).eval().save_pretrained(hf)
    proc.save_pretrained(hf)
    if st:
        from sentence_transformers import MultiVectorEncoder

        MultiVectorEncoder(str(hf), device="cpu").save(str(path))
        shutil.rmtree(hf)
    return path


def make_colqwen2(path: Path) -> Path:
    """A tiny seeded ColQwen2ForRetrieval (Qwen2-VL: text and vision width 32, 2 layers; the image processor's PIL
    backend, patch 14, merge 2: an image gives (H/28)(W/28) tokens within 4 to 16) with a ColQwen2Processor, saved as
    transformers saves them; the tokenizer tiny_vlm's (a byte-level BPE with Qwen's special tokens)."""
    import torch
    from tokenizers import models, pre_tokenizers, trainers
    from transformers import ColQwen2Config, ColQwen2ForRetrieval, ColQwen2Processor, PreTrainedTokenizerFast, Qwen2VLConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from tiny_models import _corpus, _train
    from tiny_vlm import SPECIALS

    from tokenizers import decoders

    tok = _train(models.BPE(), trainers.BpeTrainer(vocab_size=1000, special_tokens=SPECIALS,
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
                 pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel(), _corpus())
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                   padding_side="right", model_max_length=1024)
    ids = {t: fast.convert_tokens_to_ids(t) for t in SPECIALS}
    images = Qwen2VLImageProcessorPil(patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=28 * 28 * 4,
                                      max_pixels=28 * 28 * 16)
    torch.manual_seed(61)
    text = dict(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, max_position_embeddings=1024, initializer_range=0.2,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
                pad_token_id=ids["<|endoftext|>"])
    vision = dict(depth=2, embed_dim=32, hidden_size=32, mlp_ratio=2, num_heads=2, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2, initializer_range=0.2)
    vlm = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                        video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                        vision_end_token_id=ids["<|vision_end|>"])
    ColQwen2ForRetrieval(ColQwen2Config(vlm_config=vlm, embedding_dim=64, initializer_range=0.2)).eval().save_pretrained(path)
    ColQwen2Processor(image_processor=images, tokenizer=fast).save_pretrained(path)
    return path
