"""Helpers shared by the Python-backend models: parameters and per-request bookkeeping."""

from __future__ import annotations

import json

import numpy as np


def parameters(model_config: str | dict) -> dict[str, str]:
    cfg = json.loads(model_config) if isinstance(model_config, str) else model_config
    return {k: v.get("string_value", "") for k, v in cfg.get("parameters", {}).items()}


def split_rows(array: np.ndarray, counts: list[int]) -> list[np.ndarray]:
    """Split a [sum(counts), ...] array back into one array per request."""
    bounds = np.cumsum([0] + counts)
    return [array[bounds[i]:bounds[i + 1]] for i in range(len(counts))]
