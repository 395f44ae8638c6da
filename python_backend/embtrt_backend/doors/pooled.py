"""The pooled-vector door (a part: text in, a pooled head out): TEXT -> the request core
(embtrt_backend.core) -> EMBEDDING (or the vector type asked for) and TOKENS (the tokens embedded per
text, prompt and every window included). The embedder's door is it as it is; the text-and-image
kind's adds its IMAGE input."""

from __future__ import annotations

from .. import InputError
from ..core import Request, RequestCore
from ..options import OUTPUTS, load_calibration
from ..text import decode_texts
from .base import Door, Item

VECTOR_OUTPUTS = {name for name, _ in OUTPUTS.values()}


class PooledDoor(Door):
    inputs: tuple[str, ...] = ("TEXT",)

    def __init__(self, here: str, p: dict[str, str]) -> None:
        self.core = RequestCore.from_folder(here, p, load_calibration(here))

    def parse(self, arrays, params, asked) -> Item:
        texts = decode_texts(arrays["TEXT"], self.core.cfg.max_text_bytes)
        if not texts:
            raise InputError("TEXT holds no rows")
        return Item(Request(texts, None, self.request_options(params, asked)))

    def request_options(self, params, asked):
        """The request's options; refused where it asks for outputs that are not its vector type's."""
        opts = self.core.options.resolve(params)
        if asked and opts.output not in asked:   # every output when the caller names none
            wrong = sorted(n for n in asked if n in VECTOR_OUTPUTS)
            raise InputError(f"embedding_type {opts.embedding_type} comes back in {opts.output}, but the request "
                             f"asked for {', '.join(wrong) or ', '.join(asked)}", "embedding_type")
        return opts

    def outputs(self, item, out):
        return [(item.work.options.output, out.vectors), ("TOKENS", out.tokens.reshape(-1, 1))]
