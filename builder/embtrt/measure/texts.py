"""The texts of a measurement by token length: a corpus's texts grouped by length bucket (bench,
tune), and real texts made to a length band, joined and cut at a word (the stress matrix)."""

from __future__ import annotations

import numpy as np

from ..errors import SpecError


def length_buckets(counts: np.ndarray, edges: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Text indices per length bucket label ('<=32', '<=128', ..., '>L' for the rest), plus 'mixed'."""
    out: dict[str, np.ndarray] = {}
    lo = 0
    for e in edges:
        rows = np.nonzero((counts > lo) & (counts <= e))[0]
        if rows.size:
            out[f"<={e}"] = rows
        lo = e
    rest = np.nonzero(counts > lo)[0]
    if rest.size:
        out[f">{lo}"] = rest
    out["mixed"] = np.arange(counts.size)
    return out


def band_texts(tok, corpus: list[str], lo: int, hi: int, n: int, target: int | None = None) -> list[str]:
    """n real texts whose token count (special tokens included) is in (lo, hi]: corpus texts that
    fall in the band, else consecutive corpus texts joined and cut at a word to `target` tokens
    (default: the band's upper edge)."""
    def count(t: str) -> int:
        return len(tok.encode(t).ids)

    fits = [t for t in corpus if lo < count(t) <= hi]
    if len(fits) >= n and target is None:
        step = max(1, len(fits) // n)
        return fits[::step][:n]
    want = target or hi
    out: list[str] = []
    start = 0
    while len(out) < n:
        words: list[str] = []
        i = start
        while count(" ".join(words)) < want:
            words += corpus[i % len(corpus)].split()
            i += 1
        low, high = 1, len(words)   # the longest prefix of words within `want` tokens
        while low < high:
            mid = (low + high + 1) // 2
            if count(" ".join(words[:mid])) <= want:
                low = mid
            else:
                high = mid - 1
        text = " ".join(words[:low])
        if lo < count(text) <= hi:
            out.append(text)
        start += 7  # the next text starts elsewhere in the corpus
        if start > 7 * (n + 50):
            raise SpecError(f"cannot make {n} texts of {lo + 1}..{hi} tokens from the corpus")
    return out
