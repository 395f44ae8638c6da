"""CLS / mean / last-token pooling and L2 normalization in numpy (float32)."""

from __future__ import annotations

import numpy as np

MODES = ("cls", "mean", "last-token")


def last_token_index(mask: np.ndarray) -> np.ndarray:
    """Index of the last attended position per row; works for left and right padding."""
    pos = np.arange(mask.shape[1], dtype=np.int64)[None, :]
    return np.argmax(mask.astype(np.int64) * pos, axis=1)


def pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """hidden [B, S, H] float, mask [B, S] {0,1} -> [B, H] float32."""
    if hidden.ndim != 3 or mask.shape != hidden.shape[:2]:
        raise ValueError(f"pool: hidden {hidden.shape} and mask {mask.shape} do not agree")
    h = hidden.astype(np.float32, copy=False)
    if mode == "cls":  # the first attended position (0, unless a prompt was masked out of pooling)
        first = np.argmax(mask != 0, axis=1)
        return np.ascontiguousarray(h[np.arange(h.shape[0]), first, :])
    if mode == "mean":
        m = mask.astype(np.float32)[:, :, None]
        summed = (h * m).sum(axis=1)
        count = np.clip(m.sum(axis=1), 1e-9, None)
        return (summed / count).astype(np.float32)
    if mode == "last-token":
        idx = last_token_index(mask)
        return np.ascontiguousarray(h[np.arange(h.shape[0]), idx, :])
    raise ValueError(f"unknown pooling {mode!r}; allowed: {', '.join(MODES)}")


def exclude_prefix(mask: np.ndarray, skip) -> np.ndarray:
    """A copy of a right-padded attention mask with each row's first `skip` positions zeroed (one
    number, or one per row): the prompt's tokens left out of pooling, as sentence-transformers does
    with include_prompt false. The mask itself is returned when nothing is skipped."""
    skip = np.broadcast_to(np.asarray(skip, dtype=np.int64), (mask.shape[0],))
    if not skip.any():
        return mask
    return np.where(np.arange(mask.shape[1])[None, :] < skip[:, None], 0, mask).astype(mask.dtype)


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Same as torch.nn.functional.normalize(p=2, dim=1, eps=1e-12)."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norm, eps)).astype(np.float32)


def pool_and_normalize(hidden: np.ndarray, mask: np.ndarray, mode: str, normalize: bool) -> np.ndarray:
    out = pool(hidden, mask, mode)
    return l2_normalize(out) if normalize else out
