"""The page-image retriever's request core: queries and page images -> each one's token vectors, as
ColPaliForRetrieval gives them for its processor's output (`processor(text=...)`, `processor(images=...)`):

- a query is `<bos> + query_prefix + text + augmentation token x 10 + "\\n"` (the processor's query augmentation:
  the pad token, attended), tokenized with the model's tokenizer, never cut (the processor does not cut: a query
  over `max_seq_length` tokens is refused, naming its row); every attended position's vector is kept, the
  augmentation's included;
- an image is its `pixel_values` (embtrt_backend.image_core: decoded, bounded and resized as the processor's PIL
  backend) beside one constant sequence (`<image>` x image_seq_length, then `<bos>` + the visual prompt + "\\n"),
  all of whose positions are kept; a ColQwen2-style model's (`pages_family` qwen2: kinds.pages.qwen) its patches at
  its own resolution beside the visual prompt with one image token per merged patch.

Queries of several requests run together, right-padded to the longest (attention mask 0, token_type_ids 0: the
model's bidirectional mask makes a padded row equal the row alone; ColQwen2's causal one likewise), or to the smallest
bucket that holds the longest where the encoder has static shapes (CUDA graphs: `pad_to_bucket`, in runs within every
bucket's max batch), in runs
of at most max_batch rows; images in runs of at most image_max_batch (a ColPali page on static shapes of its own where
the encoder has them; a ColQwen2 page eagerly). Plain numpy (+ tokenizers); the model runs in the encoder
(kinds.pages.torch)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ... import InputError
from ...image_core import ImageCore
from ...options import TRITON_PARAMETERS
from ...routing import fitting_bucket, run_rows

DEFAULT_MAX_VECTOR_BYTES = 256 << 20   # a request's token vectors, fp32, padded: the front door's bound
KNOWN = ("input_type",)
SIDES = {"TEXT": ("query",), "IMAGE": ("document", "passage", "corpus")}


@dataclass(frozen=True)
class PagesConfig:
    dim: int                       # a token vector's width
    query_prefix: str              # before a query's text: "<bos>Question: "
    query_suffix: str              # after it: the augmentation tokens and "\n"
    image_ids: tuple[int, ...]     # every image's sequence
    max_query_tokens: int
    pad_id: int
    max_batch: int                 # query rows per model run
    max_text_bytes: int = 1 << 20
    max_vector_bytes: int = DEFAULT_MAX_VECTOR_BYTES
    family: str = "paligemma"      # paligemma (ColPali: token_type_ids, one image sequence) | qwen2 (ColQwen2)
    pad_to_bucket: bool = False    # python-torch on CUDA with graphs: queries padded to a bucket (their static shapes)
    buckets: tuple[int, ...] = ()  # the query lengths' buckets (the largest max_query_tokens)

    @classmethod
    def from_parameters(cls, p: dict[str, str]) -> "PagesConfig":
        rows = run_rows(p, int(p.get("max_batch_size") or p["encoder_max_batch_sizes"].split(",")[0]))
        return cls(dim=int(p["embtrt.dim"]), query_prefix=p["pages_query_prefix"], query_suffix=p["pages_query_suffix"],
                   image_ids=tuple(int(x) for x in p.get("pages_image_ids", "").split(",") if x),
                   max_query_tokens=int(p["max_seq_length"]), pad_id=int(p["pad_id"]),
                   max_batch=rows,
                   max_text_bytes=int(p.get("max_text_bytes") or (1 << 20)),
                   max_vector_bytes=int(p.get("max_vector_bytes") or DEFAULT_MAX_VECTOR_BYTES),
                   family=p.get("pages_family") or "paligemma", pad_to_bucket=p.get("pad_to_bucket") == "true",
                   buckets=tuple(int(x) for x in p.get("buckets", p["max_seq_length"]).split(",")))


@dataclass
class QueryRequest:
    ids: list[np.ndarray]          # each query's token ids


@dataclass
class PagesOutcome:
    vectors: list[np.ndarray] | None = None   # each item's [count, dim]
    tokens: np.ndarray | None = None          # each item's positions (usage)
    error: Exception | None = None


def side(params: dict, modality: str) -> None:
    """A request's parameters: input_type, where given, must be its modality's side (a text is a query, an image a
    document); anything else is an InputError naming it."""
    unknown = sorted(k for k in params if k not in KNOWN and k not in TRITON_PARAMETERS)
    if unknown:
        raise InputError(f"unknown request parameter {unknown[0]!r}: a page-image retriever takes input_type", unknown[0])
    it = params.get("input_type")
    if it is not None and (not isinstance(it, str) or it.lower() not in SIDES[modality]):
        what = "a text is a query (documents are page images)" if modality == "TEXT" else "an image is a document"
        raise InputError(f"invalid input_type {it!r}: {what}", "input_type")


class PagesCore:
    def __init__(self, cfg: PagesConfig, tokenizer, images) -> None:
        self.cfg, self.tokenizer, self.images = cfg, tokenizer, images   # images: ImageCore, or QwenPages (qwen2)

    @classmethod
    def from_folder(cls, folder: str, p: dict[str, str]) -> "PagesCore":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        cfg = PagesConfig.from_parameters(p)
        if cfg.family == "qwen2":
            from .qwen import QwenPages

            return cls(cfg, tok, QwenPages.from_folder(folder, p, tok))
        return cls(cfg, tok, ImageCore.from_folder(folder, p))

    def query_ids(self, texts: list[str]) -> list[np.ndarray]:
        """Each query's ids as the processor makes them; a query over the limit is refused by row."""
        c, out = self.cfg, self.query_ids_unbounded(texts)
        for row, ids in enumerate(out):
            if len(ids) > c.max_query_tokens:
                raise InputError(f"row {row}: the query is {len(ids)} tokens, over this model's {c.max_query_tokens} "
                                 "(a query is not cut: its vectors would change)", "input", row)
        self.bound(len(out), max(len(x) for x in out))
        return out

    def query_ids_unbounded(self, texts: list[str]) -> list[np.ndarray]:
        c = self.cfg
        enc = self.tokenizer.encode_batch([c.query_prefix + t + c.query_suffix for t in texts], add_special_tokens=True)
        return [np.asarray(e.ids, dtype=np.int64) for e in enc]

    def bound(self, rows: int, length: int) -> None:
        """A request's token vectors (fp32, padded) within max_vector_bytes."""
        size = rows * length * self.cfg.dim * 4
        if size > self.cfg.max_vector_bytes:
            raise InputError(f"the request's {rows} items would return {size} bytes of token vectors, over the limit of "
                             f"{self.cfg.max_vector_bytes}: send fewer items per request", "input")

    def prepare_images(self, files: list[bytes]):
        if self.cfg.family == "qwen2":   # each image's own length, known once it is read
            got = self.images.prepare(files)
            self.bound(len(files), max(len(r.ids) for r in got.rows))
            return got
        self.bound(len(files), len(self.cfg.image_ids))
        return self.images.prepare(files, None)

    def run_queries(self, requests: list[QueryRequest], encode) -> list[PagesOutcome]:
        rows = [ids for r in requests for ids in r.ids]
        c, vectors = self.cfg, []
        try:
            for a in range(0, len(rows), c.max_batch):
                chunk = rows[a:a + c.max_batch]
                longest = max(len(x) for x in chunk)   # on static shapes: the smallest bucket that holds it
                width = fitting_bucket(longest, c.buckets) if c.pad_to_bucket else longest
                ids = np.full((len(chunk), width), c.pad_id, dtype=np.int64)
                mask = np.zeros((len(chunk), width), dtype=np.int64)
                for i, x in enumerate(chunk):
                    ids[i, :len(x)], mask[i, :len(x)] = x, 1
                feeds = {"input_ids": ids, "attention_mask": mask}
                if c.family == "paligemma":   # PaliGemma's prefix attention: zeros, every attended position
                    feeds["token_type_ids"] = np.zeros_like(ids)
                out = np.asarray(encode(width if c.pad_to_bucket else c.max_query_tokens, feeds), dtype=np.float32)
                vectors += [out[i, :len(x)] for i, x in enumerate(chunk)]
        except Exception as exc:  # noqa: BLE001 (each request's INTERNAL error)
            return [PagesOutcome(error=exc) for _ in requests]
        outs, start = [], 0
        for r in requests:
            n = len(r.ids)
            mine = vectors[start:start + n]
            outs.append(PagesOutcome(mine, np.asarray([len(v) for v in mine], dtype=np.int64)))
            start += n
        return outs

    def run_images(self, requests: list, encode) -> list[PagesOutcome]:
        if self.cfg.family == "qwen2":
            return self._run_qwen(requests, encode)
        ids = np.asarray(self.cfg.image_ids, dtype=np.int64)

        def tower(feeds):
            rows = len(feeds["pixel_values"])
            seq = np.broadcast_to(ids, (rows, len(ids))).copy()
            return encode(self.cfg.max_query_tokens, {"input_ids": seq, "attention_mask": np.ones_like(seq),
                                     "token_type_ids": np.zeros_like(seq), "pixel_values": feeds["pixel_values"]})

        done = self.images.run(requests, tower, lambda vectors, _options: list(vectors))
        return [PagesOutcome(error=o.error) if o.error is not None else
                PagesOutcome(o.vectors, np.full(len(o.vectors), len(ids), dtype=np.int64)) for o in done]


    def _run_qwen(self, requests: list, encode) -> list[PagesOutcome]:
        try:
            vectors = self.images.run([r for req in requests for r in req.rows], encode, self.cfg.max_query_tokens)
        except Exception as exc:  # noqa: BLE001 (each request's INTERNAL error)
            return [PagesOutcome(error=exc) for _ in requests]
        outs, start = [], 0
        for req in requests:
            mine = vectors[start:start + len(req.rows)]
            outs.append(PagesOutcome(mine, np.asarray([len(v) for v in mine], dtype=np.int64)))
            start += len(req.rows)
        return outs
