"""The GPU kit's models, made on the GPU host from a config and a fixed seed (no weights travel;
parity is against PyTorch on the same weights), as sentence-transformers folders with the bundled
all-MiniLM-L6-v2 tokenizer (the kit's tokenizer/ folder).

Shapes: all-MiniLM-L6-v2's (BERT, 6 layers, 384 wide, mean pooling), BERT-base's (12 x 768, mean)
and bge-m3's XLM-R-large encoder (24 x 1024, 16 heads, CLS pooling, normalised) with the 30,522-entry
WordPiece vocabulary instead of XLM-R's 250,002 (the embedding table's size changes no compute per
token, and its tokenizer alone would be 17 MB to carry). `tiny` shapes for the CPU dry run.
Weights are drawn with a standard deviation (`init`) that keeps texts apart (median cosine between
different texts well below 0.99), checked before parity: a parity check on collapsed vectors
cannot fail.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SHAPES = {
    "minilm": dict(arch="bert", hidden=384, layers=6, heads=12, ffn=1536, pooling="mean", init=0.05),
    "bert-base": dict(arch="bert", hidden=768, layers=12, heads=12, ffn=3072, pooling="mean", init=0.04),
    "xlmr-large": dict(arch="xlm-roberta", hidden=1024, layers=24, heads=16, ffn=4096, pooling="cls", init=0.03),
}
TINY = {
    "minilm": dict(arch="bert", hidden=32, layers=2, heads=2, ffn=64, pooling="mean", init=0.5),
    "xlmr-large": dict(arch="xlm-roberta", hidden=32, layers=2, heads=2, ffn=64, pooling="cls", init=0.3),
}
TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def make_model(folder: Path, shape: dict, tokenizer_dir: Path, max_seq_length: int, seed: int = 0) -> Path:
    """A sentence-transformers folder of `shape` with seeded weights (safetensors)."""
    import torch
    from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel

    common = dict(vocab_size=30522, hidden_size=shape["hidden"], num_hidden_layers=shape["layers"],
                  num_attention_heads=shape["heads"], intermediate_size=shape["ffn"], initializer_range=shape["init"],
                  pad_token_id=0)
    torch.manual_seed(seed)
    if shape["arch"] == "bert":
        model = BertModel(BertConfig(**common, max_position_embeddings=max_seq_length), add_pooling_layer=False)
    else:   # XLM-R positions start after the padding index
        model = XLMRobertaModel(XLMRobertaConfig(**common, max_position_embeddings=max_seq_length + 2, bos_token_id=101,
                                                 eos_token_id=102, type_vocab_size=1), add_pooling_layer=False)
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder, safe_serialization=True)
    for name in TOKENIZER:
        shutil.copy2(tokenizer_dir / name, folder / name)
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": shape["hidden"], "pooling_mode_cls_token": shape["pooling"] == "cls",
        "pooling_mode_mean_tokens": shape["pooling"] == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (folder / "2_Normalize").mkdir(exist_ok=True)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length,
                                                                  "do_lower_case": False}))
    return folder


def texts_in_band(tokenizer_json: Path, corpus: list[str], low: int, high: int, count: int) -> list[str]:
    """`count` real texts of low+1 .. high tokens (special tokens counted): corpus texts in the band,
    then consecutive corpus texts joined and cut by words into it, until there are enough."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.no_truncation()
    tok.no_padding()

    def n(text: str) -> int:
        return len(tok.encode(text).ids)

    out = [t for t in corpus if low < n(t) <= high][:count]
    i = 0
    while len(out) < count and i < 10 * count + len(corpus):
        words: list[str] = []
        while n(" ".join(words)) <= low and len(words) < 20 * high:
            words += corpus[i % len(corpus)].split()
            i += 1
        while len(words) > 1 and n(" ".join(words)) > high:
            words = words[: max(1, len(words) * high // max(1, n(" ".join(words))) - 1)]
        if low < n(" ".join(words)) <= high:
            out.append(" ".join(words))
    if len(out) < count:
        raise SystemExit(f"gpu-kit: could not make {count} texts of {low + 1}-{high} tokens")
    return out
