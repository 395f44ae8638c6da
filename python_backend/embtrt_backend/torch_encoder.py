"""PyTorch encoder for the python-torch target: fp32, or bf16 autocast (AMX on recent Xeons).

One class per kind of model, each running the Hugging Face folder `hf_dir` as the ONNX graph of
the other targets would: the embedder's last hidden states (pooled when fused), a reranker's
classifier logits [rows, labels], a sparse encoder's SPLADE weights [rows, vocab] (MLM logits,
masked, log1p(relu) (twice for log1p_relu), max or sum over the sequence, with a graph top-K
when the front door was built with --active-dims-in-graph).
"""

from __future__ import annotations

import os

import numpy as np

from .pooling import pool_and_normalize


class _Torch:
    """What every kind shares: the precision, the thread count, and the autocast run."""

    auto_class = "AutoModel"

    def __init__(self, hf_dir: str, precision: str, intra_threads: int, trust_remote_code: bool = False) -> None:
        import torch
        import transformers

        if precision not in ("fp32", "bf16"):
            raise ValueError(f"python-torch runs fp32 or bf16, not {precision}")
        # 0 = every core: the stub's environment sets OMP_NUM_THREADS=1, which torch would follow.
        torch.set_num_threads(intra_threads if intra_threads > 0 else (os.cpu_count() or 1))
        self.torch = torch
        self.model = getattr(transformers, self.auto_class).from_pretrained(
            hf_dir, dtype=torch.float32, trust_remote_code=trust_remote_code).eval()
        self.bf16 = precision == "bf16"
        self.input_names = ("input_ids", "attention_mask", "token_type_ids")

    def forward(self, inputs: dict) -> np.ndarray:
        raise NotImplementedError

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        torch = self.torch
        inputs = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in feeds.items()}
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            return self.forward(inputs)


class TorchEncoder(_Torch):
    """An embedder: pooled vectors when `fused`, else the last hidden states (float32) for a
    separate pooler."""

    def __init__(self, hf_dir: str, precision: str, intra_threads: int, pooling: str, normalize: bool,
                 fused: bool, trust_remote_code: bool = False) -> None:
        super().__init__(hf_dir, precision, intra_threads, trust_remote_code)
        self.pooling, self.normalize, self.fused = pooling, normalize, fused

    def forward(self, inputs: dict) -> np.ndarray:
        hidden = self.model(**inputs).last_hidden_state.float().numpy()
        if not self.fused:
            return hidden
        return pool_and_normalize(hidden, inputs["attention_mask"].numpy(), self.pooling, self.normalize)


class TorchClassifier(_Torch):
    """A reranker: the *ForSequenceClassification model's logits, float32 [rows, labels]."""

    auto_class = "AutoModelForSequenceClassification"

    def forward(self, inputs: dict) -> np.ndarray:
        return self.model(**inputs).logits.float().numpy()


def splade_weights(torch, logits, attention_mask, pooling: str, double: bool, top_k: int = 0):
    """SPLADE pooling of masked-LM logits [rows, length, vocab] -> weights [rows, vocab]: masked,
    log1p(relu) (twice for log1p_relu), max or sum over the sequence, then (top_k) each row's K
    largest kept, the rest 0. The ONNX export (embtrt.export.sparse) traces this same function."""
    x = torch.log1p(torch.relu(logits * attention_mask.unsqueeze(-1).to(torch.float32)))
    if double:
        x = torch.log1p(x)
    x = x.max(dim=1).values if pooling == "max" else x.sum(dim=1)
    if top_k:   # TopK + ScatterElements in the graph
        vals, idx = torch.topk(x, top_k, dim=1)
        x = torch.zeros_like(x).scatter(1, idx, vals)
    return x


class TorchSplade(_Torch):
    """A SPLADE encoder: the masked-LM head's logits pooled into one weight per vocabulary entry."""

    auto_class = "AutoModelForMaskedLM"

    def __init__(self, hf_dir: str, precision: str, intra_threads: int, pooling: str, activation: str,
                 top_k: int = 0, trust_remote_code: bool = False) -> None:
        if pooling not in ("max", "sum") or activation not in ("relu", "log1p_relu"):
            raise ValueError(f"SPLADE pooling {pooling!r} / activation {activation!r}: must be max or sum / "
                             "relu or log1p_relu")
        super().__init__(hf_dir, precision, intra_threads, trust_remote_code)
        self.pooling, self.double, self.top_k = pooling, activation == "log1p_relu", top_k

    def forward(self, inputs: dict) -> np.ndarray:
        logits = self.model(**inputs).logits.float()
        return splade_weights(self.torch, logits, inputs["attention_mask"], self.pooling, self.double, self.top_k).numpy()


def torch_encoder(p: dict[str, str], hf_dir: str, threads: int, trust_remote_code: bool = False) -> _Torch:
    """The python-torch encoder of a model's parameters, by its kind."""
    kind = p.get("kind", "embedder")
    if kind == "reranker":
        return TorchClassifier(hf_dir, p["precision"], threads, trust_remote_code)
    if kind == "sparse":
        return TorchSplade(hf_dir, p["precision"], threads, p["splade_pooling"], p["splade_activation"],
                           int(p.get("graph_max_active_dims") or 0), trust_remote_code)
    if kind != "embedder":
        raise ValueError(f"kind {kind!r}: python-torch runs an embedder, reranker or sparse encoder")
    return TorchEncoder(hf_dir, p["precision"], threads, p["pooling"], p["normalize"] == "true",
                        p["pooler"] == "fused", trust_remote_code)
