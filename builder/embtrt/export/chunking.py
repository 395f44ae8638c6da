"""The front door cuts a mixed-length batch into padded chunks, weighing padding against the
fixed cost of one encoder run. That cost is measured here, on the encoder that is served."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..common.backend import backend_lib
from ..common.log import Log
from .spec import BuildSpec


def overhead_from_timings(samples: list[tuple[int, int, float]]) -> tuple[float, float, int]:
    """Fit seconds = fixed + per_token * rows * length over (rows, length, seconds) samples;
    return (fixed s, per-token s, fixed cost in tokens) — the run overhead the front door's
    chunking weighs against padding. Clipped to 0 .. 4096 tokens."""
    x = np.array([[1.0, r * n] for r, n, _ in samples])
    y = np.array([t for *_, t in samples])
    (fixed, per_token), *_ = np.linalg.lstsq(x, y, rcond=None)
    if per_token <= 0:
        return float(fixed), float(per_token), 4096
    return float(fixed), float(per_token), int(np.clip(round(fixed / per_token), 0, 4096))


def measure_run_overhead(encoder, input_names: tuple[str, ...], ids: list[int], reps: int = 9,
                         shapes: tuple[tuple[int, int], ...] = ((1, 16), (16, 16), (1, 32), (8, 32), (16, 32))
                         ) -> tuple[float, float, int]:
    """Time the built encoder on a few (rows, length) shapes of real token ids (the fastest of
    `reps` runs each: other work on the machine only ever adds time, and the median of 5 moved the
    fit from 35 to 71 tokens between two builds minutes apart) and fit the fixed cost of one run
    against the cost of one token."""
    samples = []
    for rows, length in shapes:
        seq = (ids * (length // max(1, len(ids)) + 1))[:length]
        feeds = {"input_ids": np.tile(np.asarray(seq, dtype=np.int64), (rows, 1)),
                 "attention_mask": np.ones((rows, length), dtype=np.int64)}
        if "token_type_ids" in input_names:
            feeds["token_type_ids"] = np.zeros((rows, length), dtype=np.int64)
        encoder.run(feeds)  # warm this shape
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            encoder.run(feeds)
            times.append(time.perf_counter() - t0)
        samples.append((rows, length, float(min(times))))
    return overhead_from_timings(samples)


def calibrate_chunking(spec: BuildSpec, encoder: object, tok_json: Path, pad_id: int, texts: list[str],
                        log: Log) -> int:
    """Measure the run overhead on the encoder the parity gate just ran (the one that is served)."""
    text_mod, _ = backend_lib()
    ids = text_mod.TextTokenizer(str(tok_json), spec.max_seq_length, pad_id).encode(texts[:1]).ids[0]
    fixed, per_token, tokens = measure_run_overhead(encoder, spec.input_names, ids)
    log(run_cost_line(fixed, per_token, tokens))
    return tokens


def run_cost_line(fixed: float, per_token: float, tokens: int) -> str:
    """What the fit of seconds = fixed + per_token * tokens found, for the build log. A fitted cost
    at or below zero is timing noise and is said to be one, never shown as a measured cost."""
    fit = "encoder run cost, fitted as time = fixed per run + per token x tokens over timed batch shapes: "
    if per_token <= 0:
        found = f"no per-token cost above the timing noise (the fit gave {per_token * 1e6:.1f} us per token)"
        tokens_note = f"{tokens} tokens, the cap"
    elif fixed < 0:
        found = (f"{per_token * 1e6:.1f} us per token, no fixed cost above the timing noise "
                 f"(the fit gave {fixed * 1e3:.2f} ms per run, below zero)")
        tokens_note = f"{tokens} tokens"
    else:
        found = f"{fixed * 1e3:.2f} ms per run + {per_token * 1e6:.1f} us per token"
        tokens_note = f"{tokens} tokens"
    return fit + found + f" -> run overhead {tokens_note} (front-door chunking; --run-overhead-tokens overrides)"
