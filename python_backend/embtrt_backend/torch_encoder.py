"""PyTorch encoder for the python-torch target: fp32, or bf16 autocast (AMX on recent Xeons)."""

from __future__ import annotations

import os

import numpy as np

from .pooling import pool_and_normalize


class TorchEncoder:
    """Runs the Hugging Face model folder `hf_dir`; returns pooled vectors when `fused`, else
    the last hidden states (float32) for a separate pooler."""

    def __init__(self, hf_dir: str, precision: str, intra_threads: int, pooling: str, normalize: bool,
                 fused: bool, trust_remote_code: bool = False) -> None:
        import torch
        from transformers import AutoModel

        if precision not in ("fp32", "bf16"):
            raise ValueError(f"python-torch runs fp32 or bf16, not {precision}")
        # 0 = every core: the stub's environment sets OMP_NUM_THREADS=1, which torch would follow.
        torch.set_num_threads(intra_threads if intra_threads > 0 else (os.cpu_count() or 1))
        self.torch = torch
        self.model = AutoModel.from_pretrained(hf_dir, dtype=torch.float32, trust_remote_code=trust_remote_code).eval()
        self.bf16 = precision == "bf16"
        self.pooling, self.normalize, self.fused = pooling, normalize, fused
        self.input_names = ("input_ids", "attention_mask", "token_type_ids")

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        torch = self.torch
        inputs = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in feeds.items()}
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            hidden = self.model(**inputs).last_hidden_state.float().numpy()
        if not self.fused:
            return hidden
        return pool_and_normalize(hidden, feeds["attention_mask"], self.pooling, self.normalize)
