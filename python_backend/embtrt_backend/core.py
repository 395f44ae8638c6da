"""The request core of texts (the embedder's and the sparse encoder's), on the one core of every
kind (batch_core.BatchCore: prepare, the encoder per chunk, finish):

    tokenize(requests): prompts prepended, every request's texts tokenized in one call with each
        request's truncation, over-long texts refused (that request only); token ids as given;
    after: pool(output, feeds, chunk.skip), with the prompt's tokens left out of pooling where the
        model says so (skip_of: the one place of that rule); nothing where the graph pools;
    result: the windows of a long text merged (--overflow chunk), then the request's options applied
        (width, vector type).

The Triton front door (router/model.py) and the gateway's token-id route both call it; plain
numpy (+ tokenizers), tested without Triton against SentenceTransformer.encode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import InputError
from .batch_core import BatchCore, Chunk, Rows  # noqa: F401 (Chunk: the gateway imports it from here)
from .options import DEFAULT, ModelOptions, RequestOptions
from .pooling import exclude_prefix, pool_and_normalize
from .routing import RUN_OVERHEAD_TOKENS
from .text import Encoded, TextTokenizer, merge_windows


@dataclass(frozen=True)
class CoreConfig:
    """How the front door plans, pads and pools: its config's parameters, read by every caller."""

    buckets: tuple[int, ...]
    max_batch: tuple[int, ...]        # per bucket: the encoder's max batch (token budget)
    input_names: tuple[str, ...]
    dim: int
    fused: bool = True                # pooling and normalize inside the encoder graph
    pooling: str = "mean"
    normalize: bool = True
    pad_to_bucket: bool = False       # fixed-shape encoders (TensorRT plans): every row padded to its bucket
    run_overhead: int = RUN_OVERHEAD_TOKENS  # the plan's fixed cost of one encoder run, in tokens
    max_text_bytes: int = 1 << 20

    @classmethod
    def from_parameters(cls, p: dict[str, str]) -> "CoreConfig":
        return cls(buckets=tuple(int(x) for x in p["buckets"].split(",")),
                   max_batch=tuple(int(x) for x in p["encoder_max_batch_sizes"].split(",")),
                   input_names=tuple(p["input_names"].split(",")), dim=int(p["embtrt.dim"]),
                   fused=p["pooler"] == "fused", pooling=p["pooling"], normalize=p["normalize"] == "true",
                   pad_to_bucket=p["pad_to_bucket"] == "true", run_overhead=int(p.get("run_overhead_tokens", RUN_OVERHEAD_TOKENS)),
                   max_text_bytes=int(p.get("max_text_bytes", str(1 << 20))))


@dataclass
class Request:
    """One request: texts, or token ids in the model's own vocabulary (embedded as given: no
    prompt, no truncation), with its resolved options."""

    texts: list[str] | None = None
    ids: list[list[int]] | None = None
    options: RequestOptions = DEFAULT


@dataclass
class Outcome:
    """A request's result (vectors as its options ask, tokens embedded per text), or its error."""

    vectors: np.ndarray | None = None
    tokens: np.ndarray | None = None
    error: Exception | None = None   # InputError: the request's fault; anything else: the server's


class RequestCore(BatchCore):
    outcome = Outcome

    def __init__(self, cfg: CoreConfig, tokenizer: TextTokenizer, options: ModelOptions) -> None:
        self.cfg, self.tokenizer, self.options = cfg, tokenizer, options

    @property
    def padder(self) -> TextTokenizer:
        return self.tokenizer

    @classmethod
    def from_folder(cls, folder: str, p: dict[str, str], calibration: np.ndarray | None = None) -> "RequestCore":
        """The front door's core from its version folder (tokenizer.json) and config parameters."""
        import os

        tok = TextTokenizer(os.path.join(folder, "tokenizer.json"), int(p["max_seq_length"]), int(p["pad_id"]),
                            p.get("overflow", "truncate"), int(p.get("overflow_stride", "0")))
        return cls(CoreConfig.from_parameters(p), tok, ModelOptions.from_parameters(p, calibration))

    def skip_of(self, opts: RequestOptions) -> int:
        """The prompt's tokens left out of pooling (the Pooling config's include_prompt false)."""
        return self.options.prompt_skip(opts, self.tokenizer.tok)

    @property
    def width(self) -> int:
        return self.cfg.dim

    # ---- tokenize: each request's rows (BatchCore.prepare plans them) --------------------------
    def tokenize(self, requests: list[Request]) -> list[Rows | Exception | None]:
        out: list[Rows | Exception | None] = [None] * len(requests)
        texts: list[str] = []
        modes: list[str | None] = []
        spans: list[tuple[int, int]] = []     # each text request's texts in `texts`: one tokenizer call for all
        for i, r in enumerate(requests):
            if r.texts is None:
                continue
            o = r.options
            spans.append((i, len(texts)))
            texts.extend([o.prompt + t for t in r.texts] if o.prompt else r.texts)
            modes.extend([o.truncate] * len(r.texts))
        # a request of no texts is served empty (no rows), as an empty batch of rows is
        enc = self.tokenizer.encode_mixed(texts, modes) if texts else Encoded([], [], np.zeros(0, np.int64))
        owner = np.arange(len(texts)) if enc.owner is None else enc.owner   # text of each encoded row
        text_tokens = np.bincount(owner, weights=enc.lengths, minlength=len(texts)).astype(np.int64)
        if enc.owner is None:  # one row per text: its length is the text's (no ufunc.at on the hot path)
            text_len = enc.lengths
        else:  # --overflow chunk: the longest window of each text
            text_len = np.zeros(len(texts), np.int64)
            np.maximum.at(text_len, owner, enc.lengths)
        max_len = self.tokenizer.max_length
        row_of_text = np.searchsorted(owner, np.arange(len(texts) + 1)).tolist()   # owner is sorted
        # the checks below look at a request's texts only where some text of the batch needs it
        long_any, empty_any = bool((text_len > max_len).any()), bool((text_len == 0).any())
        for i, start in spans:
            r = requests[i]
            end = start + len(r.texts or ())
            if long_any and self.tokenizer.refuses_long(r.options.truncate):
                over = np.nonzero(text_len[start:end] > max_len)[0]
                if over.size:
                    out[i] = InputError(
                        f"row {int(over[0])}: text is longer than the max sequence length {max_len} tokens (truncate "
                        f"NONE{'' if r.options.truncate else ', the build used --overflow reject'})", "input", int(over[0]))
                    continue
            empty = np.nonzero(text_len[start:end] == 0)[0] if empty_any else ()
            if len(empty):   # no row to run: an empty text, and a tokenizer that adds no special tokens
                out[i] = InputError(f"row {int(empty[0])}: the text tokenizes to no tokens", "input", int(empty[0]))
                continue
            a, b = row_of_text[start], row_of_text[end]
            out[i] = Rows(enc.ids[a:b], enc.type_ids[a:b], self.skip_of(r.options), text_tokens[start:end],
                          None if enc.owner is None else owner[a:b] - start)
        for i, r in enumerate(requests):
            if r.ids is not None:
                k = next((j for j, x in enumerate(r.ids) if len(x) == 0), None)
                out[i] = InputError(f"row {k}: no token ids", "input", k) if k is not None else \
                    Rows(r.ids, [[0] * len(x) for x in r.ids])
        return out

    def result(self, request: Request, out: np.ndarray, rows: Rows, lengths: np.ndarray) -> Outcome:
        """A text's windows merged (--overflow chunk), then the request's options applied (width, vector type);
        the tokens embedded per text."""
        if rows.owner is not None and rows.tokens is not None and len(rows.ids) != len(rows.tokens):
            out = merge_windows(out, rows.owner, len(rows.tokens), self.cfg.normalize)
        return Outcome(self.options.finish(out, request.options), rows.tokens if rows.tokens is not None else lengths)

    # ---- one encoder run (BatchCore.run: feeds, the encoder, after, finish) ----------------------
    def after(self, output: np.ndarray, feeds: dict[str, np.ndarray], chunk: Chunk) -> np.ndarray:
        return self.pool(output, feeds, chunk.skip)

    def pool(self, output: np.ndarray, feeds: dict[str, np.ndarray], skip: np.ndarray) -> np.ndarray:
        """The encoder's output -> one vector per row (already pooled when the graph is fused)."""
        if self.cfg.fused:
            return output
        return pool_and_normalize(output, exclude_prefix(feeds["attention_mask"], skip), self.cfg.pooling,
                                  self.cfg.normalize)
