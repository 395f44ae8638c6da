"""The pair input's request core, with the scores head: (query, document) pairs, or single texts -> scores,
as CrossEncoder.predict does (a part of its own: the reranker and the classifier are both built of it).

On the one core of every kind (embtrt_backend.batch_core.BatchCore: prepare, the encoder per
chunk, finish), the pair core writes:
    tokenize(requests): each request's pairs tokenized as one sequence pair with the model's
        truncation (longest_first at the max length, the request's direction), over-long pairs
        refused where the request says truncate false (that request only); the core plans the rows
        into per-bucket chunks by pair length (routing.plan, as texts are for embedders);
    after: the encoder's logits as [rows, labels];
    result: scores with the request's activation (the model's default, raw logits, or softmax),
        tokens per pair.

The reranker's and the classifier's front doors (kinds/*/door.py, run by router/model.py) and their builds' gates call it; plain numpy
(+ tokenizers), tested without Triton against CrossEncoder.predict.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import InputError
from .batch_core import BatchCore, Chunk, Rows
from .pair_template import PairTemplate
from .routing import RUN_OVERHEAD_TOKENS
from .text import Encoded, TextTokenizer

ACTIVATIONS = ("default", "raw", "softmax", "sigmoid")
DIRECTIONS = ("right", "left")
MODEL_ACTIVATIONS = ("sigmoid", "identity", "softmax")   # softmax: a classifier's of several labels


def truncation_direction(value: object) -> str | None:
    """A request's truncation_direction (any case) -> right | left; None where it is neither. One
    rule for the front door and the gateway; each refuses a None in its own words."""
    return value.lower() if isinstance(value, str) and value.lower() in DIRECTIONS else None


@dataclass(frozen=True)
class PairOptions:
    activation: str = "default"       # default: the model's (CrossEncoder's activation_fn)
    truncate: bool = True             # false: a pair over the max length is the request's error
    direction: str = "right"          # which end of the longer sequence truncation cuts
    prompt: str = ""                  # prepended to the query, as CrossEncoder.predict(prompt_name=...)
    instruction: str | None = None    # an LLM-style reranker's instruction (None: its template's default)

    @classmethod
    def parse(cls, params: dict[str, object], prompts: dict[str, str] | None = None,
              default_prompt_name: str | None = None, takes_instruction: bool = False) -> "PairOptions":
        """A request's parameters (Triton request parameters, as JSON values) -> its options; an
        unknown name or a bad value is an InputError naming it. prompt_name picks one of the
        model's prompts; none given: the model's default prompt, as CrossEncoder does. `instruction`
        only where the model has a prompt template (an LLM-style reranker)."""
        prompts = prompts or {}
        known = {"activation", "truncate", "truncation_direction", "prompt_name"} | ({"instruction"} if takes_instruction else set())
        unknown = sorted(set(params) - known)
        if unknown:
            raise InputError(f"unknown request parameter {unknown[0]!r} (this model takes "
                             f"{', '.join(sorted(known))})", unknown[0])
        act = params.get("activation", "default")
        if act not in ACTIVATIONS:
            raise InputError(f"activation {act!r}: must be one of {', '.join(ACTIVATIONS)}", "activation")
        trunc = params.get("truncate", True)
        if isinstance(trunc, str) and trunc.lower() in ("true", "false"):
            trunc = trunc.lower() == "true"
        if not isinstance(trunc, bool):
            raise InputError(f"truncate {trunc!r}: must be true or false", "truncate")
        given = params.get("truncation_direction", "right")
        direction = truncation_direction(given)
        if direction is None:
            shown = given.lower() if isinstance(given, str) else given
            raise InputError(f"truncation_direction {shown!r}: must be right or left", "truncation_direction")
        name = params.get("prompt_name", default_prompt_name)
        if name is not None and (not isinstance(name, str) or name not in prompts):
            raise InputError(f"prompt_name {name!r}: this model's prompts are {', '.join(sorted(prompts)) or 'none'}",
                             "prompt_name")
        instruction = params.get("instruction")
        if instruction is not None and not isinstance(instruction, str):
            raise InputError(f"instruction {instruction!r}: must be a string", "instruction")
        return cls(str(act), trunc, str(direction), prompts[name] if name is not None else "", instruction)


DEFAULT = PairOptions()


def activate(logits: np.ndarray, activation: str, model_activation: str) -> np.ndarray:
    """Scores as CrossEncoder.predict returns them: its activation_fn (sigmoid or identity), the raw
    logits, or softmax over the labels (predict(apply_softmax=True), several labels only); a
    classifier's default is softmax or sigmoid per label (transformers' rule), and `sigmoid` asks for
    sigmoid per label (the text-classification pipeline's function_to_apply)."""
    x = np.asarray(logits, dtype=np.float32)
    if activation == "raw":
        return x
    if activation == "default" and model_activation == "softmax":
        activation = "softmax"
    if activation == "sigmoid":
        return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    if activation == "softmax":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    if model_activation == "sigmoid":
        return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    return x


@dataclass(frozen=True)
class PairConfig:
    buckets: tuple[int, ...]
    max_batch: tuple[int, ...]
    input_names: tuple[str, ...]
    num_labels: int
    activation: str = "sigmoid"       # the model's default (CrossEncoder's activation_fn)
    pad_to_bucket: bool = False
    run_overhead: int = RUN_OVERHEAD_TOKENS
    max_text_bytes: int = 1 << 20
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt_name: str | None = None
    template: PairTemplate | None = None   # an LLM-style reranker's prompt template (embtrt_backend.pair_template)

    @classmethod
    def from_parameters(cls, p: dict[str, str]) -> "PairConfig":
        import json

        return cls(buckets=tuple(int(x) for x in p["buckets"].split(",")),
                   max_batch=tuple(int(x) for x in p["encoder_max_batch_sizes"].split(",")),
                   input_names=tuple(p["input_names"].split(",")), num_labels=int(p["num_labels"]),
                   activation=p.get("activation", "sigmoid"), pad_to_bucket=p.get("pad_to_bucket") == "true",
                   run_overhead=int(p.get("run_overhead_tokens", RUN_OVERHEAD_TOKENS)),
                   max_text_bytes=int(p.get("max_text_bytes", str(1 << 20))),
                   prompts=tuple(sorted(json.loads(p.get("prompts") or "{}").items())),
                   default_prompt_name=p.get("default_prompt_name") or None,
                   template=PairTemplate.from_json(p.get("pair_template")))


@dataclass
class PairRequest:
    queries: list[str]
    documents: list[str] | None      # None: single texts (a classifier's), tokenized alone
    options: PairOptions = DEFAULT


@dataclass
class PairOutcome:
    scores: np.ndarray | None = None   # float32 [pairs, labels]
    tokens: np.ndarray | None = None   # int64 [pairs]
    error: Exception | None = None


class PairTokenizer:
    """tokenizer.json with CrossEncoder's pair truncation (longest_first at the max length) in
    either direction, and one token more than the max where over-long pairs are refused."""

    def __init__(self, tokenizer_json: str, max_length: int, pad_id: int) -> None:
        self.text = TextTokenizer(tokenizer_json, max_length, pad_id)
        self.max_length = int(max_length)
        self._by: dict[tuple, object] = {}

    def _variant(self, truncate: bool, direction: str):
        key = (truncate, direction)
        if key not in self._by:
            from tokenizers import Tokenizer

            t = Tokenizer.from_str(self.text.tok.to_str())
            t.no_padding()
            t.enable_truncation(max_length=self.max_length + (0 if truncate else 1), strategy="longest_first",
                                direction=direction)
            self._by[key] = t
        return self._by[key]

    def encode(self, queries: list[str], documents: list[str] | None, opts: PairOptions) -> Encoded:
        """Pairs, or (documents None) single texts, as the model's tokenizer makes them."""
        items = list(zip(queries, documents)) if documents is not None else list(queries)
        encs = self._variant(opts.truncate, opts.direction).encode_batch(items, add_special_tokens=True)
        lengths = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
        return Encoded([e.ids for e in encs], [e.type_ids for e in encs], lengths)

    def encode_template(self, template: PairTemplate, queries: list[str], documents: list[str],
                        opts: PairOptions) -> Encoded:
        """Pairs through an LLM-style reranker's template (embtrt_backend.pair_template): each middle tokenized
        alone and cut to the max length less the prefix and suffix tokens (one token more where over-long
        pairs are refused), then prefix + middle + suffix."""
        key = (template, opts.truncate, opts.direction)   # a frozen template: its own tokenizer variant
        if key not in self._by:
            from tokenizers import Tokenizer

            fixed = self.text.tok
            prefix = fixed.encode(template.prefix, add_special_tokens=False).ids
            suffix = fixed.encode(template.suffix, add_special_tokens=False).ids
            room = self.max_length - len(prefix) - len(suffix)
            if room < 1:
                raise InputError(f"the prompt template takes {len(prefix) + len(suffix)} tokens: no room under the max "
                                 f"length {self.max_length}", "QUERY")
            t = Tokenizer.from_str(fixed.to_str())
            t.no_padding()
            t.enable_truncation(max_length=room + (0 if opts.truncate else 1), direction=opts.direction)
            self._by[key] = (t, prefix, suffix)
        t, prefix, suffix = self._by[key]
        encs = t.encode_batch([template.text(q, d, opts.instruction) for q, d in zip(queries, documents)],
                              add_special_tokens=True)
        ids = [prefix + e.ids + suffix for e in encs]
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        return Encoded(ids, [[0] * len(x) for x in ids], lengths)


class PairCore(BatchCore):
    outcome = PairOutcome
    fields = ("QUERY", "DOCUMENT")   # the front door's inputs, in refusals (a classifier's: TEXT, TEXT_PAIR)
    item = "pair"

    def __init__(self, cfg: PairConfig, tokenizer: PairTokenizer) -> None:
        self.cfg, self.tokenizer = cfg, tokenizer

    @property
    def padder(self) -> TextTokenizer:
        return self.tokenizer.text

    @classmethod
    def from_folder(cls, folder: str, p: dict[str, str]) -> "PairCore":
        import os

        tok = PairTokenizer(os.path.join(folder, "tokenizer.json"), int(p["max_seq_length"]), int(p["pad_id"]))
        return cls(PairConfig.from_parameters(p), tok)

    def options(self, params: dict[str, object]) -> PairOptions:
        """A request's parameters -> its options, with this model's prompts (or its template's instruction)."""
        return PairOptions.parse(params, dict(self.cfg.prompts), self.cfg.default_prompt_name,
                                 takes_instruction=self.cfg.template is not None)

    @property
    def width(self) -> int:
        return self.cfg.num_labels

    def tokenize(self, requests: list[PairRequest]) -> list[Rows | Exception | None]:
        """Each request's pairs, tokenized as one sequence pair each with its truncation; a request whose
        pairs do not match, or hold one that is empty or over the max length (truncate false), is refused."""
        out: list[Rows | Exception | None] = []
        max_len = self.tokenizer.max_length
        first, second = self.fields
        for r in requests:
            if r.documents is not None and len(r.queries) != len(r.documents):
                out.append(InputError(f"{first} has {len(r.queries)} rows and {second} {len(r.documents)}: one "
                                      f"{first.lower()} per {second.lower()}", first))
                continue
            # a refused row is named by the input that holds it: a pair's by its second, a single text by its own
            field = second if r.documents is not None else first
            if not r.queries:
                out.append(InputError(f"the request holds no {self.item}s", field))
                continue
            if self.cfg.template is not None and r.documents is not None:
                enc = self.tokenizer.encode_template(self.cfg.template, r.queries, r.documents, r.options)
            else:
                queries = [r.options.prompt + q for q in r.queries] if r.options.prompt else r.queries
                enc = self.tokenizer.encode(queries, r.documents, r.options)
            empty = np.nonzero(enc.lengths == 0)[0]
            over = np.nonzero(enc.lengths > max_len)[0] if not r.options.truncate else empty[:0]
            what = "pair" if r.documents is not None else "text"
            if empty.size:   # no row to run: an empty pair, and a tokenizer that adds no special tokens
                out.append(InputError(f"row {int(empty[0])}: the {what} tokenizes to no tokens", field, int(empty[0])))
            elif over.size:
                out.append(InputError(f"row {int(over[0])}: the {what} is longer than the max length {max_len} tokens "
                                      "(truncate false)", field, int(over[0])))
            else:
                out.append(Rows(enc.ids, enc.type_ids))
        return out

    def after(self, output: np.ndarray, feeds: dict[str, np.ndarray], chunk: Chunk) -> np.ndarray:
        return np.asarray(output, np.float32).reshape(len(chunk.rows), -1)   # logits [rows, labels]

    def result(self, request: PairRequest, out: np.ndarray, rows: Rows, lengths: np.ndarray) -> PairOutcome:
        return PairOutcome(activate(out, request.options.activation, self.cfg.activation), lengths.copy())
