"""The multi-vector encoder's references, and whether a folder is one:
- a sentence-transformers `MultiVectorEncoder` folder (ColBERT: Transformer, a projection (Dense),
  MultiVectorMask, Normalize): `encode_query` / `encode_document`, MaxSim `similarity`;
- a bge-m3-style folder (a transformers encoder with `colbert_linear.pt` and `sparse_linear.pt` beside
  it): FlagEmbedding's `BGEM3FlagModel.encode` recipe, computed here in PyTorch from the folder
  (FlagEmbedding is not a dependency; the tests compare with it in process). A folder with one head
  file and not the other is refused: FlagEmbedding silently gives both heads random weights then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ModelError
from ...reference.detect import st_model_type

M3_HEADS = ("colbert_linear.pt", "sparse_linear.pt")
M3_DEFAULT_LENGTH = 512   # BGEM3FlagModel's query_max_length / passage_max_length


def is_multivector(path: Path) -> bool:
    """A MultiVectorEncoder folder (config_sentence_transformers.json says so)."""
    return st_model_type(path) == "MultiVectorEncoder"


def m3_heads(path: Path) -> tuple[str, ...]:
    """The bge-m3 head files beside the model (a bge-m3-style folder has both)."""
    return tuple(n for n in M3_HEADS if (Path(path) / n).is_file())


def colbert_rule(path: Path) -> tuple[bool, str]:
    """Detection (embtrt_backend.kinds.DETECTION): a MultiVectorEncoder folder."""
    if is_multivector(path):
        return True, "config_sentence_transformers.json says model_type MultiVectorEncoder (ColBERT)"
    return False, "no config_sentence_transformers.json saying model_type MultiVectorEncoder"


def m3_rule(path: Path) -> tuple[bool, str]:
    """Detection: bge-m3's head files beside the model (its folder is a SentenceTransformer too)."""
    heads = m3_heads(path)
    if heads:
        return True, f"{' and '.join(heads)} beside the model (bge-m3: dense, sparse and ColBERT outputs)"
    return False, f"neither of bge-m3's {' / '.join(M3_HEADS)} beside the model"


@dataclass(frozen=True)
class MultiVectorInfo:
    layout: str                       # colbert | m3
    dim: int                          # a token vector's width
    hidden: int                       # the encoder's hidden size (m3: the dense vector's width)
    max_length: int                   # the longest side's tokens
    query_length: int
    document_length: int
    expansion_id: int = -1            # queries padded with it to query_length (-1: no expansion)
    expansion_attend: bool = False
    skiplist: tuple[int, ...] = ()
    skip_queries: bool = False
    drop_ids: tuple[int, ...] = ()    # m3: the lexical weights' dropped ids (cls, eos, pad, unk)
    normalize: bool = True
    similarity: str = "maxsim"
    prompts: dict[str, str] = field(default_factory=dict)
    input_names: tuple[str, ...] = ("input_ids", "attention_mask")

    def params(self) -> dict[str, str]:
        """The front door's parameters of it (embtrt_backend.kinds.multivector.core.MultiVectorConfig)."""
        return {"mv_layout": self.layout, "mv_dim": str(self.dim), "mv_hidden": str(self.hidden),
                "mv_query_length": str(self.query_length), "mv_document_length": str(self.document_length),
                "mv_expansion_id": str(self.expansion_id), "mv_expansion_attend": str(self.expansion_attend).lower(),
                "mv_skiplist": ",".join(map(str, self.skiplist)), "mv_skip_queries": str(self.skip_queries).lower(),
                "mv_drop_ids": ",".join(map(str, self.drop_ids)), "mv_normalize": str(self.normalize).lower(),
                "mv_similarity": self.similarity}


# ---- MultiVectorEncoder (ColBERT) -------------------------------------------------------------------
def load_multivector(path: Path, trust_remote_code: bool = False):
    from sentence_transformers import MultiVectorEncoder

    try:
        return MultiVectorEncoder(str(path), device="cpu", trust_remote_code=trust_remote_code)
    except Exception as exc:  # sentence-transformers / transformers raise many types
        raise ModelError(f"sentence-transformers cannot load {path} as a MultiVectorEncoder: {exc}",
                         "a ColBERT folder loads with sentence_transformers.MultiVectorEncoder") from exc


def colbert_info(mve, max_seq_length: int | None = None) -> MultiVectorInfo:
    """What the served path needs of a MultiVectorEncoder; a module layout embtrt does not serve exactly
    is refused naming what differs."""
    import torch

    names = [type(m).__name__ for m in mve]
    if names[:2] != ["Transformer", "Dense"] or any(n not in ("MultiVectorMask", "Normalize") for n in names[2:]):
        raise ModelError(f"a MultiVectorEncoder of {', '.join(names)}",
                         "embtrt serves Transformer, Dense, then MultiVectorMask and Normalize (ColBERT)")
    t, dense = mve[0], mve[1]
    if not isinstance(dense.activation_function, torch.nn.Identity):
        raise ModelError(f"its Dense projection has the activation {type(dense.activation_function).__name__}",
                         "embtrt serves ColBERT's identity projection")
    tok = t.tokenizer
    if getattr(tok, "padding_side", "right") != "right":
        raise ModelError("its tokenizer pads on the left", "embtrt serves multi-vector models that pad on the right")
    if getattr(mve, "truncate_dim", None):
        raise ModelError(f"it is saved with truncate_dim {mve.truncate_dim}", "save it without truncate_dim")
    exp = t.query_expansion or None
    mask = next((m for m in mve if type(m).__name__ == "MultiVectorMask"), None)
    if mask is None and exp is not None:   # without it the expansion positions run but are not returned
        raise ModelError("query expansion without a MultiVectorMask",
                         "embtrt serves ColBERT's layout: Transformer, Dense, MultiVectorMask, Normalize")
    if mask is not None and getattr(mask, "keep_only_token_ids", None):
        raise ModelError("its MultiVectorMask keeps only some token ids", "embtrt serves skiplist masks")
    limit = int(max_seq_length or t.max_seq_length)
    exp_id, attend = -1, False
    if exp is not None:
        if exp.get("strategy") != "fixed":
            raise ModelError(f"query expansion {exp.get('strategy')!r}", "embtrt serves the fixed strategy")
        q_len, attend = int(exp["length"]), bool(exp.get("attend", False))
        exp_id = tok.convert_tokens_to_ids(exp["token"]) if exp.get("token") else tok.mask_token_id
        if exp_id is None:
            exp_id = tok.eos_token_id
    else:
        q_len = int(t.query_length or limit)
    skip = tuple(int(i) for i in mask._skiplist_ids.tolist()) if mask is not None and mask._skiplist_ids is not None else ()
    tasks = tuple(mask.skiplist_tasks) if mask is not None else ("document",)
    names_in = tuple(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tok("a"))
    d_len = min(int(t.document_length or limit), limit)
    return MultiVectorInfo(
        "colbert", int(dense.linear.out_features), int(dense.linear.in_features), max(q_len, d_len), q_len, d_len,
        int(exp_id), attend, skip, "query" in tasks, (), any(n == "Normalize" for n in names), mve.similarity_fn_name,
        {str(k): str(v) for k, v in (mve.prompts or {}).items() if v is not None}, names_in)


def colbert_heads(mve) -> dict[str, np.ndarray]:
    lin = mve[1].linear
    heads = {"weight": lin.weight.detach().float().numpy()}
    if lin.bias is not None:
        heads["bias"] = lin.bias.detach().float().numpy()
    return heads


def colbert_encode(mve, texts: list[str], side: str) -> list[np.ndarray]:
    """MultiVectorEncoder.encode_query / encode_document -> each text's [count, dim] float32."""
    fn = mve.encode_query if side == "query" else mve.encode_document
    return [np.asarray(v, dtype=np.float32) for v in fn(texts, batch_size=32, convert_to_numpy=True, show_progress_bar=False)]


# ---- bge-m3 -----------------------------------------------------------------------------------------
@dataclass
class M3Reference:
    """FlagEmbedding's BGEM3FlagModel recipe on a folder, in PyTorch: the encoder, the tokenizer, both heads."""

    model: Any
    tokenizer: Any
    heads: dict[str, np.ndarray]
    drop_ids: tuple[int, ...]
    max_length: int

    def encode(self, texts: list[str], batch: int = 16) -> dict:
        """-> {dense_vecs [n, hidden], lexical_weights [{id: weight}], colbert_vecs [[tokens - 1, dim]]}: each
        text tokenized alone (truncation at max_length), run in padded batches, its own positions read."""
        import torch

        F = torch.nn.functional
        hd = {k: torch.from_numpy(v) for k, v in self.heads.items()}
        dense, lexical, colbert = [], [], []
        drop = set(self.drop_ids)
        for i in range(0, len(texts), batch):
            enc = self.tokenizer(texts[i:i + batch], truncation=True, max_length=self.max_length, padding=True,
                                 return_tensors="pt")
            with torch.inference_mode():   # dense: CLS; colbert: every position after it; sparse: relu per position
                h = self.model(**enc).last_hidden_state
                d = F.normalize(h[:, 0], dim=-1).numpy()
                col = F.normalize(F.linear(h[:, 1:], hd["colbert_weight"], hd["colbert_bias"]), dim=-1).numpy()
                sp = torch.relu(F.linear(h, hd["sparse_weight"], hd["sparse_bias"]))[..., 0].numpy()
            for j, ids in enumerate(enc["input_ids"].tolist()):
                n = int(enc["attention_mask"][j].sum())
                dense.append(d[j])
                colbert.append(col[j, :n - 1].copy())
                weights: dict[int, float] = {}
                for tid, w in zip(ids[:n], sp[j, :n].tolist()):
                    if tid not in drop and w > 0:
                        weights[tid] = max(weights.get(tid, 0.0), w)
                lexical.append(weights)
        return {"dense_vecs": np.asarray(dense, dtype=np.float32), "lexical_weights": lexical, "colbert_vecs": colbert}


def load_m3(path: Path, max_seq_length: int | None = None, trust_remote_code: bool = False) -> M3Reference:
    import torch
    from transformers import AutoModel, AutoTokenizer

    present = m3_heads(path)
    if not present:
        raise ModelError(f"{Path(path).name} has neither colbert_linear.pt nor sparse_linear.pt",
                         "a bge-m3 folder holds both heads beside the model (a ColBERT folder is a MultiVectorEncoder save)")
    if len(present) != 2:
        missing = [n for n in M3_HEADS if n not in present]
        raise ModelError(f"{Path(path).name} has {present[0]} but no {missing[0]}",
                         "a bge-m3 folder needs both colbert_linear.pt and sparse_linear.pt beside the model "
                         "(FlagEmbedding would give both heads random weights without one of them)")
    try:
        model = AutoModel.from_pretrained(str(path), dtype=torch.float32, attn_implementation="eager",
                                          trust_remote_code=trust_remote_code).eval()
        tok = AutoTokenizer.from_pretrained(str(path))
        col = torch.load(Path(path) / M3_HEADS[0], map_location="cpu", weights_only=True)
        sp = torch.load(Path(path) / M3_HEADS[1], map_location="cpu", weights_only=True)
    except Exception as exc:  # transformers / torch raise many types
        raise ModelError(f"cannot load {path} as a bge-m3 model: {exc}",
                         "a bge-m3 folder loads with transformers' AutoModel and torch.load of its two heads") from exc
    heads = {"colbert_weight": col["weight"], "colbert_bias": col["bias"], "sparse_weight": sp["weight"],
             "sparse_bias": sp["bias"]}
    heads = {k: v.detach().float().numpy() for k, v in heads.items()}
    hidden = int(model.config.hidden_size)
    if heads["colbert_weight"].shape[1] != hidden or heads["sparse_weight"].shape != (1, hidden):
        raise ModelError(f"head shapes colbert {list(heads['colbert_weight'].shape)}, sparse "
                         f"{list(heads['sparse_weight'].shape)} for hidden size {hidden}",
                         "colbert_linear.pt is [dim, hidden] and sparse_linear.pt [1, hidden], each with a bias")
    if getattr(tok, "padding_side", "right") != "right":
        raise ModelError("its tokenizer pads on the left", "embtrt serves multi-vector models that pad on the right")
    specials: dict[str, Any] = dict(tok.special_tokens_map)   # FlagEmbedding's unused tokens: cls, eos, pad, unk
    ids: list[Any] = [tok.convert_tokens_to_ids(str(specials[k])) for k in ("cls_token", "eos_token", "pad_token", "unk_token")
                      if k in specials]
    drop = tuple(sorted({int(i) for i in ids}))
    limit = int(min(tok.model_max_length, getattr(model.config, "max_position_embeddings", 10 ** 9) - 2))
    length = int(max_seq_length or min(M3_DEFAULT_LENGTH, limit))
    return M3Reference(model, tok, heads, drop, length)


def m3_info(ref: M3Reference) -> MultiVectorInfo:
    tok = ref.tokenizer
    names_in = tuple(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tok("a"))
    return MultiVectorInfo("m3", int(ref.heads["colbert_weight"].shape[0]), int(ref.model.config.hidden_size),
                           ref.max_length, ref.max_length, ref.max_length, drop_ids=ref.drop_ids,
                           similarity="m3", input_names=names_in)
