"""The sparse encoder's reference: sentence-transformers' SparseEncoder (SPLADE: an MLM head,
log(1 + relu(logits)) pooled over the sequence), and whether a folder is one."""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import ModelError
from ...reference.cache import cached
from ...reference.detect import st_model_type


def sparse_modules(path: Path) -> list[str] | None:
    """The module types of a SparseEncoder folder (modules.json naming sparse_encoder modules), else None."""
    try:
        mods = json.loads((Path(path) / "modules.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    types = [str(m.get("type", "")) for m in mods if isinstance(m, dict)] if isinstance(mods, list) else []
    if len(types) == 1 and types[0].endswith("Router"):   # inference-free SPLADE: its routes name the modules
        try:
            routed = json.loads((Path(path) / "router_config.json").read_text(encoding="utf-8")).get("types", {})
        except (OSError, json.JSONDecodeError):
            return None
        return types if any(".sparse_encoder." in str(t) for t in routed.values()) else None
    return types if any(".sparse_encoder." in t or t.endswith(("SpladePooling", "MLMTransformer")) for t in types) else None


def sparse_rule(path: Path) -> tuple[bool, str]:
    """Detection (embtrt_backend.kinds.DETECTION): a SparseEncoder folder."""
    if st_model_type(path) == "SparseEncoder" or sparse_modules(path):
        return True, "a sentence-transformers SparseEncoder folder (SPLADE)"
    return False, "not a SparseEncoder (no model_type SparseEncoder, no sparse_encoder modules in modules.json)"


@dataclass(frozen=True)
class SpladeInfo:
    max_length: int
    vocab: int
    pooling: str        # max | sum
    activation: str     # relu | log1p_relu (a second log1p)
    input_names: tuple[str, ...]
    encoder_dir: str = ""           # inference-free: the document route's MLM folder, relative to the model
    query_max_length: int = 0       # inference-free: the static query side's max length (0: not inference-free)


_SOURCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # encoder -> (its folder, trust_remote_code)


def load_sparse_encoder(path: Path, trust_remote_code: bool = False):
    from sentence_transformers import SparseEncoder

    try:
        se = SparseEncoder(str(path), device="cpu", trust_remote_code=trust_remote_code)
    except Exception as exc:  # sentence-transformers / transformers raise many types
        raise ModelError(f"sentence-transformers cannot load {path} as a SparseEncoder: {exc}",
                         "a sparse folder loads with sentence_transformers.SparseEncoder") from exc
    _SOURCES[se] = (str(path), trust_remote_code)   # se_encode's reference-cache key
    return se


def _router_info(se, path: Path) -> SpladeInfo:
    """An inference-free SPLADE: a Router whose query route is one SparseStaticEmbedding and whose
    document route is an MLM Transformer + SpladePooling."""
    router = se[0]
    q, d = router.sub_modules["query"], router.sub_modules["document"]
    names = [type(m).__name__ for m in (*q, *d)]
    if len(q) != 1 or type(q[0]).__name__ != "SparseStaticEmbedding" or len(d) != 2 \
            or type(d[1]).__name__ != "SpladePooling" or not hasattr(d[0], "auto_model"):
        raise ModelError(f"{Path(path).name}: a Router of {', '.join(names)}",
                         "embtrt builds inference-free SPLADE as SparseStaticEmbedding (query) + MLM Transformer and "
                         "SpladePooling (document)")
    structure = json.loads((Path(path) / "router_config.json").read_text())["structure"]
    folder = structure["document"][0]
    tok = d[0].tokenizer
    names_in = tuple(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tok("a"))
    return SpladeInfo(int(d[0].max_seq_length), int(d[0].auto_model.config.vocab_size), str(d[1].pooling_strategy),
                      str(d[1].activation_function), names_in, folder, int(q[0].max_seq_length))


def splade_info(se, path: Path) -> SpladeInfo:
    types = sparse_modules(path) or []
    if len(types) == 1 and types[0].endswith("Router"):
        return _router_info(se, path)
    if len(types) != 2 or not types[0].endswith("Transformer") or not types[1].endswith("SpladePooling"):
        raise ModelError(f"{Path(path).name}: SparseEncoder modules {', '.join(t.rsplit('.', 1)[-1] for t in types)}",
                         "embtrt builds SPLADE (MLMTransformer + SpladePooling); inference-free SPLADE (a Router with "
                         "SparseStaticEmbedding) is not built yet")
    pool = se[1]
    tok = se[0].tokenizer
    names = tuple(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tok("a"))
    return SpladeInfo(int(se.max_seq_length), int(se[0].auto_model.config.vocab_size), str(pool.pooling_strategy),
                      str(pool.activation_function), names)


def doc_module(se):
    """The module that tokenizes and runs the documents: the first, or an inference-free SPLADE's
    document route's first."""
    return se[0].sub_modules["document"][0] if type(se[0]).__name__ == "Router" else se[0]


def static_query_weights(se) -> np.ndarray:
    """The learned per-token weights of an inference-free SPLADE's query side."""
    return se[0].sub_modules["query"][0].weight.detach().float().numpy()


def se_encode(se, texts: list[str], which: str = "document", prompt_name: str | None = None) -> np.ndarray:
    """SparseEncoder.encode_query / encode_document as dense float32 [texts, vocab]; for an encoder
    loaded by load_sparse_encoder, kept in the reference cache (stored sparse), keyed by its folder,
    the texts, the side, the prompt and the lengths and default top-k it runs with now."""
    source = _SOURCES.get(se)
    if source is None:
        return _se_encode(se, texts, which, prompt_name)
    doc = doc_module(se)
    options = {"which": which, "prompt_name": prompt_name, "trust_remote_code": source[1],
               "max_seq_length": se.max_seq_length, "document_max_seq_length": getattr(doc, "max_seq_length", None),
               "max_active_dims": getattr(se, "max_active_dims", None)}
    return cached("sparse-encoder", Path(source[0]), texts, options, lambda: _se_encode(se, texts, which, prompt_name),
                  sparse=True)


def _se_encode(se, texts: list[str], which: str, prompt_name: str | None) -> np.ndarray:
    fn = se.encode_query if which == "query" else se.encode_document
    kw = {"prompt_name": prompt_name} if prompt_name else {}
    out = fn(texts, batch_size=32, convert_to_tensor=True, show_progress_bar=False, **kw)
    dense = out.to_dense() if getattr(out, "is_sparse", False) or out.layout != __import__("torch").strided else out
    return dense.float().numpy()
