"""The VLM embedder's front door: TEXT (BYTES), IMAGE (BYTES: encoded files), or both, row k of each one input (a
text and an image fused in one sequence; Triton gives both inputs of a request the same batch size) -> EMBEDDING
(FP32 [rows, dim]: each input's normalised vector) and TOKENS (each input's sequence length). Parameter:
instruction (the system message; default the model card's "Represent the user's input.")."""

from __future__ import annotations

from ... import InputError
from ...doors.base import Door, Item
from ...text import decode_texts
from . import KIND
from .core import VlmCore

INPUTS = ("TEXT", "IMAGE")


class VlmDoor(Door):
    inputs = INPUTS
    image_input = KIND.image_input

    def __init__(self, here: str, p: dict[str, str]) -> None:
        self.core = VlmCore.from_folder(here, p)

    @property
    def buckets(self) -> tuple[int, ...]:
        return self.core.buckets

    def parse(self, arrays, params, asked) -> Item:
        text, image = arrays.get("TEXT"), arrays.get(self.image_input)
        if text is None and image is None:
            raise InputError("the request has no TEXT and no IMAGE input")
        texts = None if text is None else decode_texts(text, 1 << 20)
        files = None if image is None else list(image.ravel())
        if not (texts or files):
            raise InputError("the request holds no rows")
        return Item(self.core.prepare(texts, files, params))

    def outputs(self, item, out):
        return [("EMBEDDING", out.vectors), ("TOKENS", out.tokens.reshape(-1, 1))]
