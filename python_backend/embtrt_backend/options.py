"""Per-request options, one set on every surface: prompt_name, input_type, dimensions, truncate,
embedding_type. Each equals `SentenceTransformer.encode` with the same option:

- prompt_name / input_type: the prompt text is prepended before tokenizing; with the Pooling
  config's include_prompt false, the prompt's tokens (as sentence-transformers counts them: the
  prompt tokenized alone, less a trailing special token) are left out of pooling. Without a
  choice the model's default prompt applies, as encode() does.
- dimensions (Matryoshka): the first d components, L2-normalized again when the model normalizes
  (encode(truncate_dim=d, normalize_embeddings=True)).
- truncate: END keeps the start (sentence-transformers' default), START keeps the end (special
  tokens kept, as a tokenizer with truncation_side="left"), NONE makes an over-long text that
  request's error.
- embedding_type: float, or sentence_transformers.quantization.quantize_embeddings' int8, uint8,
  binary, ubinary. int8/uint8 take their per-dimension ranges from calibration vectors computed at
  build time (stored in the repository), processed with the request's width, so a vector never
  depends on the other texts of its batch.

Plain numpy, tested without Triton; the front door and the gateway both use it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from . import InputError

OPTION_NAMES = ("prompt_name", "input_type", "dimensions", "truncate", "embedding_type")
# request parameters that Triton's own clients and the KServe protocol may send beside the options
TRITON_PARAMETERS = ("priority", "timeout", "sequence_id", "sequence_start", "sequence_end", "binary_data_output",
                     "triton_enable_empty_final_response", "headers")
TRUNCATE = ("END", "START", "NONE")
EMBEDDING_TYPES = ("float", "int8", "uint8", "binary", "ubinary")
INPUT_TYPES = {"query": ("query",), "passage": ("passage", "document"), "document": ("document", "passage")}
# The output tensor (and dtype) of each vector type on the front door.
OUTPUTS = {"float": ("EMBEDDING", np.float32), "int8": ("EMBEDDING_INT8", np.int8), "binary": ("EMBEDDING_INT8", np.int8),
           "uint8": ("EMBEDDING_UINT8", np.uint8), "ubinary": ("EMBEDDING_UINT8", np.uint8)}


@dataclass(frozen=True)
class RequestOptions:
    prompt_name: str | None = None   # the prompt applied (None: no prompt text)
    prompt: str = ""
    dimensions: int | None = None    # None: the full width
    truncate: str | None = None      # None: the build's --overflow
    embedding_type: str = "float"
    # the prompt chosen (asked, or the model's default), named even when its text is empty: the
    # prompt_name that, passed on (the gateway to the front door), resolves to these same options
    prompt_choice: str | None = None

    @property
    def output(self) -> str:
        return OUTPUTS[self.embedding_type][0]


DEFAULT = RequestOptions()


@dataclass
class ModelOptions:
    """What a model allows and how it applies the options (from its config parameters or manifest)."""

    dim: int
    normalize: bool
    prompts: dict[str, str]
    default_prompt_name: str | None = None
    include_prompt: bool = True
    allowed_dimensions: tuple[int, ...] | None = None   # None: any 1 .. dim
    calibration: np.ndarray | None = None              # [N, dim] float32 vectors of the calibration corpus

    def __post_init__(self) -> None:
        self._ranges: dict[int, np.ndarray] = {}
        self._skips: dict[str, int] = {}
        self._default: RequestOptions | None = None

    @classmethod
    def from_parameters(cls, p: dict[str, str], calibration: np.ndarray | None = None) -> "ModelOptions":
        dims = p.get("dimensions", "")
        return cls(dim=int(p["embtrt.dim"]), normalize=p.get("normalize", "true") == "true",
                   prompts=json.loads(p.get("prompts", "{}") or "{}"),
                   default_prompt_name=p.get("default_prompt_name") or None,
                   include_prompt=p.get("include_prompt", "true") == "true",
                   allowed_dimensions=tuple(int(x) for x in dims.split(",") if x) or None,
                   calibration=calibration)

    @property
    def default(self) -> RequestOptions:
        """The options of a request that sets none (resolved once: most requests)."""
        return self.resolve({})

    def prompt_skip(self, opts: RequestOptions, tokenizer) -> int:
        """The prompt's tokens left out of pooling: none unless the Pooling config's include_prompt is
        false (the one place of this rule: front door, bucket tokenizers, gateway, build)."""
        if self.include_prompt or not opts.prompt:
            return 0
        if opts.prompt not in self._skips:
            self._skips[opts.prompt] = prompt_length(tokenizer, opts.prompt)
        return self._skips[opts.prompt]

    def widths_text(self) -> str:
        if self.allowed_dimensions is None:
            return f"any width from 1 to {self.dim}"
        return ", ".join(map(str, self.allowed_dimensions))

    def resolve(self, raw: dict) -> RequestOptions:
        """Request parameters (any subset of OPTION_NAMES, beside Triton's own) -> options. A bad
        value, or a name that is not an option (a misspelt `dimension` must not silently give
        full-width vectors), raises InputError naming the parameter and what is allowed."""
        if not raw:   # most requests: resolved once
            if self._default is None:
                self._default = self._resolve({})
            return self._default
        return self._resolve(raw)

    def _resolve(self, raw: dict) -> RequestOptions:
        unknown = sorted(k for k in raw if k not in OPTION_NAMES and k not in TRITON_PARAMETERS)
        if unknown:
            raise InputError(f"unknown request parameter{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: "
                             f"the options are {', '.join(OPTION_NAMES)}", unknown[0])
        prompt_name = _text(raw, "prompt_name")
        input_type = _text(raw, "input_type")
        if input_type is not None:
            key = input_type.lower()
            if key not in INPUT_TYPES:
                raise InputError(f"invalid input_type {input_type!r}: allowed query, passage, document", "input_type")
            mapped = next((n for n in INPUT_TYPES[key] if n in self.prompts), None)
            if mapped is None:
                raise InputError(f"input_type {input_type!r}: this model has no {' or '.join(INPUT_TYPES[key])} prompt "
                                 f"(its prompts: {', '.join(sorted(self.prompts)) or 'none'})", "input_type")
            if prompt_name is not None and prompt_name != mapped:
                raise InputError(f"prompt_name {prompt_name!r} and input_type {input_type!r} (prompt {mapped!r}) disagree: "
                                 "give one of them", "input_type")
            prompt_name = mapped
        if prompt_name is None:
            prompt_name = self.default_prompt_name
        elif prompt_name not in self.prompts:
            raise InputError(f"unknown prompt_name {prompt_name!r}: this model's prompts are "
                             f"{', '.join(sorted(self.prompts)) or 'none'}", "prompt_name")
        prompt = self.prompts.get(prompt_name, "") if prompt_name else ""

        dimensions = raw.get("dimensions")
        if dimensions is not None:
            dimensions = _int(dimensions, "dimensions")
            ok = 1 <= dimensions <= self.dim if self.allowed_dimensions is None else dimensions in self.allowed_dimensions
            if not ok:
                raise InputError(f"invalid dimensions {dimensions}: this model allows {self.widths_text()}", "dimensions")
            if dimensions == self.dim:
                dimensions = None

        truncate = _text(raw, "truncate")
        if truncate is not None:
            truncate = truncate.upper()
            if truncate not in TRUNCATE:
                raise InputError(f"invalid truncate {raw['truncate']!r}: allowed END, START, NONE", "truncate")

        etype = _text(raw, "embedding_type") or "float"
        etype = etype.lower()
        if etype not in EMBEDDING_TYPES:
            raise InputError(f"invalid embedding_type {raw['embedding_type']!r}: allowed {', '.join(EMBEDDING_TYPES)}",
                             "embedding_type")
        if etype in ("int8", "uint8") and self.calibration is None:
            raise InputError(f"embedding_type {etype} needs calibration ranges, which this model does not carry (an "
                             "embedder's build writes them; a multi-vector or text-and-image model has none): use float, "
                             "binary or ubinary", "embedding_type")
        return RequestOptions(prompt_name if prompt else None, prompt, dimensions, truncate, etype,
                              prompt_name if prompt_name in self.prompts else None)

    # ---- after pooling ------------------------------------------------------------------------
    def width(self, vecs: np.ndarray, opts: RequestOptions) -> np.ndarray:
        """The first d components, renormalized when the model normalizes."""
        if opts.dimensions is None:
            return vecs
        out = np.ascontiguousarray(vecs[:, :opts.dimensions], dtype=np.float32)
        if self.normalize:
            out = (out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)).astype(np.float32)
        return out

    def ranges(self, width: int | None) -> np.ndarray:
        """[2, d] per-dimension min and max of the calibration vectors at this width."""
        key = width or self.dim
        if key not in self._ranges:
            assert self.calibration is not None
            cal = self.width(self.calibration, RequestOptions(dimensions=width))
            self._ranges[key] = np.vstack((cal.min(axis=0), cal.max(axis=0))).astype(np.float32)
        return self._ranges[key]

    def finish(self, vecs: np.ndarray, opts: RequestOptions) -> np.ndarray:
        """Pooled (and normalized) full-width vectors of one request -> the tensor it asked for."""
        v = self.width(vecs, opts)
        return quantize(v, opts.embedding_type, self.ranges(opts.dimensions) if opts.embedding_type in ("int8", "uint8") else None)


def quantize(v: np.ndarray, etype: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """sentence-transformers' quantize_embeddings, with given ranges for int8 / uint8."""
    if etype == "float":
        return v.astype(np.float32, copy=False)
    if etype in ("binary", "ubinary"):
        packed = np.packbits(v > 0, axis=-1)
        return packed if etype == "ubinary" else (packed - 128).astype(np.int8)
    assert ranges is not None
    starts = ranges[0, :]
    steps = (ranges[1, :] - starts) / 255
    steps = np.where(steps == 0, 1, steps)
    q = np.clip(np.floor((v - starts) / steps), 0, 255)
    return q.astype(np.uint8) if etype == "uint8" else (q - 128).astype(np.int8)


def prompt_length(tokenizer, prompt: str) -> int:
    """Tokens of the prompt as sentence-transformers counts them for include_prompt false: the
    prompt tokenized alone (special tokens added), less a trailing special token."""
    if not prompt:
        return 0
    enc = tokenizer.encode(prompt, add_special_tokens=True)
    n = len(enc.ids)
    if n and enc.special_tokens_mask[-1] == 1:
        n -= 1
    return n


CALIBRATION_FILE = "embtrt_calibration.npy"


def load_calibration(folder: str) -> np.ndarray | None:
    """The calibration vectors the build stored beside the front door's tokenizer (None: absent)."""
    import os

    path = os.path.join(folder, CALIBRATION_FILE)
    return np.load(path).astype(np.float32, copy=False) if os.path.isfile(path) else None


def parse_request_parameters(raw: str | dict | None) -> dict:
    """Triton request parameters (the Python backend gives a JSON string) -> dict."""
    if raw is None or raw == "" or raw == "{}":   # most requests carry no parameters: no JSON parse
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        out = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"request parameters are not valid JSON ({exc})") from None
    return out if isinstance(out, dict) else {}


def _text(raw: dict, name: str) -> str | None:
    v = raw.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise InputError(f"invalid {name}: must be a string, got {type(v).__name__} {v!r}", name)
    return v


def _int(v: object, name: str) -> int:
    """An integer, and only an integer: "128" is refused as the gateway refuses it (one rule on every
    surface: a JSON string or a gRPC string parameter is not a width)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise InputError(f"invalid {name}: must be an integer, got {type(v).__name__} {v!r}", name)
