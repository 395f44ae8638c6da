"""Reference embeddings: PyTorch float32, the way sentence-transformers computes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import ModelError
from .cache import cached
from .modelinfo import inspect_model


def torch_pool(hidden, mask, mode: str):
    """Pooling in torch; the same math goes into the ONNX head (hf2onnx) and numpy (pooler)."""
    import torch

    if mode == "cls":
        return hidden[:, 0]
    if mode == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
    if mode == "last-token":
        pos = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
        idx = (mask.to(torch.int64) * pos).argmax(1)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), idx]
    raise ValueError(f"unknown pooling {mode!r}")


def load_hf(model_dir: Path, trust_remote_code: bool = False):
    """(tokenizer, model) in eval mode, float32, on CPU."""
    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code)
        model = AutoModel.from_pretrained(
            str(model_dir), trust_remote_code=trust_remote_code, dtype=torch.float32,
            attn_implementation="eager",
        )
    except Exception as exc:  # transformers raises many types; we re-raise typed
        raise ModelError(f"cannot load {model_dir} with transformers: {exc}", "is it a Hugging Face model folder?") from exc
    model.eval()
    return tok, model


class TorchReference:
    """Embeds texts one length-sorted batch at a time, with the build's pooling settings."""

    def __init__(self, model_dir: Path, pooling: str, normalize: bool, max_length: int,
                 input_names: tuple[str, ...], trust_remote_code: bool = False) -> None:
        self.model_dir, self.trust_remote_code = Path(model_dir), trust_remote_code
        self.pooling, self.normalize, self.max_length = pooling, normalize, max_length
        self.input_names = input_names
        self._loaded: tuple | None = None

    @property
    def tok(self):
        return self._load()[0]

    @property
    def model(self):
        return self._load()[1]

    def _load(self) -> tuple:
        """(tokenizer, model), loaded on first use: a cached reference never loads the model."""
        if self._loaded is None:
            self._loaded = load_hf(self.model_dir, self.trust_remote_code)
        return self._loaded

    def embed(self, texts: list[str], batch_size: int = 16, max_batch_tokens: int = 16384) -> np.ndarray:
        """Length-sorted batches of at most batch_size rows and max_batch_tokens padded tokens, so a
        16K-token text runs alone instead of padding 15 others to 16K. Kept in the reference cache
        (reference/cache.py), keyed by the folder, the texts and these options."""
        options = {"pooling": self.pooling, "normalize": self.normalize, "max_length": self.max_length,
                   "input_names": list(self.input_names), "batch_size": batch_size,
                   "max_batch_tokens": max_batch_tokens, "trust_remote_code": self.trust_remote_code}
        return cached("torch-fp32", self.model_dir, texts, options,
                      lambda: self._embed(texts, batch_size, max_batch_tokens))

    def _embed(self, texts: list[str], batch_size: int, max_batch_tokens: int) -> np.ndarray:
        import torch
        import torch.nn.functional as F

        lengths = [len(ids) for ids in self.tok(texts, truncation=True, max_length=self.max_length)["input_ids"]]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        batches: list[list[int]] = []
        for i in order:  # ascending lengths: the newest row is the longest of its batch
            if batches and len(batches[-1]) < batch_size and (len(batches[-1]) + 1) * lengths[i] <= max_batch_tokens:
                batches[-1].append(i)
            else:
                batches.append([i])
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        with torch.inference_mode():
            for rows in batches:
                enc = self.tok([texts[i] for i in rows], padding=True, truncation=True,
                               max_length=self.max_length, return_tensors="pt")
                enc = {k: v for k, v in enc.items() if k in self.input_names}
                hidden = self.model(**enc).last_hidden_state
                vec = torch_pool(hidden, enc["attention_mask"], self.pooling)
                if self.normalize:
                    vec = F.normalize(vec, p=2, dim=1)
                out[rows] = vec.float().numpy()
        return out


def st_embed(model_dir: Path, texts: list[str], batch_size: int = 32, max_seq_length: int | None = None,
             trust_remote_code: bool = False, **encode_options) -> np.ndarray:
    """sentence-transformers' own encode, for folders that are sentence-transformers models.
    `encode_options` go to encode() as they are (prompt_name, prompt, truncate_dim,
    normalize_embeddings, ...); without them encode() applies the model's default prompt. Kept in
    the reference cache (reference/cache.py), keyed by the folder, the texts and these options."""

    def compute() -> np.ndarray:
        from sentence_transformers import SentenceTransformer

        m = SentenceTransformer(str(model_dir), device="cpu", trust_remote_code=trust_remote_code)
        if max_seq_length is not None:
            m.max_seq_length = max_seq_length
        return np.asarray(m.encode(texts, batch_size=batch_size, convert_to_numpy=True, **encode_options),
                          dtype=np.float32)

    options = {"batch_size": batch_size, "max_seq_length": max_seq_length, "trust_remote_code": trust_remote_code,
               "encode": encode_options}
    return cached("sentence-transformers", Path(model_dir), texts, options, compute)


class Reference:
    def __init__(self, model_dir: Path, pooling: str | None = None, normalize: bool | None = None,
                 trust_remote_code: bool = False) -> None:
        self.path = Path(model_dir)
        self.info = inspect_model(self.path, trust_remote_code)
        self.pooling = pooling or self.info.pooling or ("last-token" if self.info.is_decoder else "cls")
        self.normalize = normalize if normalize is not None else (self.info.normalize if self.info.normalize is not None else True)
        self.max_len = self.info.max_seq_length or 512
        self.trust_remote_code = trust_remote_code
        self.use_st = self.info.is_sentence_transformers and pooling is None and normalize is None

    def describe(self) -> str:
        kind = "sentence-transformers" if self.use_st else f"PyTorch fp32 ({self.pooling}, normalize {self.normalize})"
        return f"{self.path} [{kind}]"

    def embed(self, texts: list[str], prompt_name: str | None = None, dimensions: int | None = None) -> np.ndarray:
        """What SentenceTransformer.encode gives: the default prompt unless `prompt_name` picks one;
        `dimensions`: encode(truncate_dim=d), normalized again when the model normalizes."""
        if self.use_st:
            kw: dict = {}
            if prompt_name is not None:
                kw["prompt_name"] = prompt_name
            if dimensions is not None:
                kw["truncate_dim"] = dimensions
                kw["normalize_embeddings"] = bool(self.normalize)
            return st_embed(self.path, texts, trust_remote_code=self.trust_remote_code, **kw)
        if prompt_name is not None:
            raise ModelError(f"{self.path} is not a sentence-transformers folder: it has no prompts to pick "
                             f"({prompt_name!r})", "verify without --prompt-name, or against the sentence-transformers folder")
        out = TorchReference(self.path, self.pooling, self.normalize, self.max_len, self.info.input_names,
                             self.trust_remote_code).embed(texts)
        if dimensions is not None:
            out = out[:, :dimensions]
            if self.normalize:
                out = out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return np.asarray(out, dtype=np.float32)

    def token_counts(self, texts: list[str]) -> np.ndarray:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(self.path), trust_remote_code=self.trust_remote_code)
        return np.array([len(x) for x in tok(texts, truncation=False, verbose=False)["input_ids"]])
