"""A tiny seeded CLIP-style model (#53), built offline: a BPE tokenizer trained on the bundled corpus with
CLIP's special tokens and end-of-word suffix, a CLIPModel (text and vision towers of width 32, patch 32 on
224 x 224 images, projection 16, initializer spread so that inputs are told apart) and its processor with
the PIL image backend, saved as transformers saves it and as sentence-transformers saves it (one
multimodal Transformer module: `modalities == ["text", "image"]`)."""

from __future__ import annotations

import shutil
from pathlib import Path


def make_clip(path: Path) -> Path:
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
    text = CLIPTextConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=2, max_position_embeddings=77, bos_token_id=bos, eos_token_id=eos,
                          pad_token_id=eos, initializer_range=0.2)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                              image_size=224, patch_size=32, initializer_range=0.2)
    CLIPModel(CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=16)).eval().save_pretrained(hf)
    CLIPProcessor(image_processor=CLIPImageProcessorPil(), tokenizer=fast).save_pretrained(hf)
    SentenceTransformer(str(hf), device="cpu").save(str(path))
    shutil.rmtree(hf)
    return path
