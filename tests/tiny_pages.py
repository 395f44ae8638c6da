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


def make_colpali(path: Path, st: bool = False) -> Path:
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
    images = SiglipImageProcessorPil(size={"height": IMAGE, "width": IMAGE}, image_seq_length=(IMAGE // PATCH) ** 2)
    proc = ColPaliProcessor(image_processor=images, tokenizer=fast)
    vocab = len(proc.tokenizer)
    torch.manual_seed(21)
    text = GemmaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=16, max_position_embeddings=256, pad_token_id=0, eos_token_id=1,
                       bos_token_id=2, initializer_range=0.2)
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                image_size=IMAGE, patch_size=PATCH, vision_use_head=False)
    vlm = PaliGemmaConfig(vision_config=vision.to_dict(), text_config=text.to_dict(), image_token_index=proc.image_token_id,
                          vocab_size=vocab, projection_dim=32, hidden_size=32)
    hf = path.with_name(path.name + "-hf") if st else path
    ColPaliForRetrieval(ColPaliConfig(vlm_config=vlm.to_dict(), embedding_dim=16)).eval().save_pretrained(hf)
    proc.save_pretrained(hf)
    if st:
        from sentence_transformers import MultiVectorEncoder

        MultiVectorEncoder(str(hf), device="cpu").save(str(path))
        shutil.rmtree(hf)
    return path
