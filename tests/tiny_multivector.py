"""Tiny seeded multi-vector models, built offline: a ColBERT-style MultiVectorEncoder (a small BERT with
MiniLM's WordPiece vocabulary, a 128-wide projection, query expansion to 32 tokens, the punctuation
skiplist, query and document prompts) and a bge-m3-shaped folder (an XLM-R encoder with a Unigram
tokenizer trained here, XLM-R's special ids 0-3, and both head files, colbert_linear.pt and
sparse_linear.pt). Their weights are seeded and spread (initializer_range 0.2), so different texts
give different vectors; FlagEmbedding's BGEM3FlagModel is imported through `flag_m3` with the
stand-ins FINDINGS describes (it is a test reference only, installed without its dependencies)."""

from __future__ import annotations

import shutil
import string
from pathlib import Path


def make_colbert(path: Path, prompts: dict[str, str] | None = None) -> Path:
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask
    from transformers import AutoTokenizer, BertConfig, BertModel

    from embtrt.reference.modelinfo import default_model_path

    hf = path.with_name(path.name + "-hf")
    tok = AutoTokenizer.from_pretrained(str(default_model_path()))
    torch.manual_seed(5)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, initializer_range=0.2)
    BertModel(cfg, add_pooling_layer=False).eval().save_pretrained(hf)
    tok.save_pretrained(hf)
    t = Transformer(str(hf), query_length=32, document_length=48, query_expansion={"strategy": "fixed", "length": 32})
    torch.manual_seed(6)
    d = Dense(32, 128, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    m = MultiVectorEncoder(modules=[t, d, MultiVectorMask(skiplist_words=list(string.punctuation)),
                                    Normalize(module_input_name="token_embeddings")],
                           prompts={"query": "query: ", "document": "passage: "} if prompts is None else prompts,
                           device="cpu")
    m.save(str(path))
    shutil.rmtree(hf)
    return path


def make_minilm_colbert(path: Path) -> Path:
    """The bundled all-MiniLM-L6-v2 encoder with a seeded 384 -> 128 ColBERT projection (queries expanded to
    32 tokens, documents up to 256, the punctuation skiplist, no prompts): the bench's model (speed depends
    on the shape, not on trained weights)."""
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    from embtrt.reference.modelinfo import default_model_path

    t = Transformer(str(default_model_path()), query_length=32, document_length=256,
                    query_expansion={"strategy": "fixed", "length": 32})
    torch.manual_seed(9)
    d = Dense(384, 128, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    MultiVectorEncoder(modules=[t, d, MultiVectorMask(skiplist_words=list(string.punctuation)),
                                Normalize(module_input_name="token_embeddings")], device="cpu").save(str(path))
    return path


def make_m3(path: Path, heads: bool = True) -> Path:
    """A bge-m3-shaped folder: XLMRobertaModel (hidden 32, max length 64), its tokenizer, and (heads)
    colbert_linear.pt [32, 32] + bias and sparse_linear.pt [1, 32] + bias beside it."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    from tiny_models import xlmr_tokenizer

    tok, _ = xlmr_tokenizer(path, 1500, 64)
    torch.manual_seed(7)
    cfg = XLMRobertaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=66, pad_token_id=1, bos_token_id=0,
                           eos_token_id=2, type_vocab_size=1, initializer_range=0.2)
    XLMRobertaModel(cfg, add_pooling_layer=False).eval().save_pretrained(path)
    if heads:
        torch.manual_seed(8)
        colbert, sparse = torch.nn.Linear(32, 32), torch.nn.Linear(32, 1)
        with torch.no_grad():
            sparse.bias.fill_(0.5)   # about half the positions keep a weight, as a trained head
        torch.save(colbert.state_dict(), path / "colbert_linear.pt")
        torch.save(sparse.state_dict(), path / "sparse_linear.pt")
    return path


def flag_m3(path: Path):
    """FlagEmbedding's BGEM3FlagModel on `path` (fp32, CPU), imported with stand-ins for the modules its
    package __init__ needs and this environment lacks (transformers.modeling_attn_mask_utils, datasets,
    peft: FINDINGS)."""
    import importlib.machinery
    import sys
    import types

    added: list[str] = []   # the stand-ins leave sys.modules once FlagEmbedding is imported (other tests must not see them)
    try:
        import transformers.modeling_attn_mask_utils  # noqa: F401
    except ImportError:
        stub = types.ModuleType("transformers.modeling_attn_mask_utils")
        for n in ("AttentionMaskConverter", "_prepare_4d_causal_attention_mask",
                  "_prepare_4d_causal_attention_mask_for_sdpa", "_prepare_4d_attention_mask"):
            setattr(stub, n, lambda *a, **k: None)
        sys.modules[stub.__name__] = stub
        added.append(stub.__name__)

    class _Any(types.ModuleType):
        def __getattr__(self, n):
            if n.startswith("__"):
                raise AttributeError(n)
            return type(n, (), {})

    for name in ("datasets", "peft"):
        try:
            __import__(name)
        except ImportError:
            mod = _Any(name)
            mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = mod
            added.append(name)
    try:
        from FlagEmbedding import BGEM3FlagModel
    finally:
        for name in added:
            sys.modules.pop(name, None)

    return BGEM3FlagModel(str(path), use_fp16=False, devices="cpu")


MULTIVECTOR = {"colbert": make_colbert, "m3": make_m3}
PUNCTUATION = string.punctuation
