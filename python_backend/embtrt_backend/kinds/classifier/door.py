"""The classifier's front door: TEXT (and, optionally, TEXT_PAIR: one pair per row) -> the pair core
(embtrt_backend.pairs, single texts tokenized alone) -> SCORES (FP32 [rows, labels]:
softmax over the labels, or sigmoid per label for one label or a multi-label model, as transformers'
text-classification pipeline applies them; `activation` raw gives the logits) and TOKENS."""

from __future__ import annotations

from ... import InputError
from ...doors.base import Door, Item
from ...text import decode_texts
from ...pairs import PairConfig, PairCore, PairRequest, PairTokenizer


class ClassifierCore(PairCore):
    fields = ("TEXT", "TEXT_PAIR")
    item = "text"

    @classmethod
    def from_folder(cls, folder: str, p: dict[str, str]) -> "ClassifierCore":
        import os

        tok = PairTokenizer(os.path.join(folder, "tokenizer.json"), int(p["max_seq_length"]), int(p["pad_id"]))
        return cls(PairConfig.from_parameters(p), tok)


class ClassifierDoor(Door):
    inputs = ("TEXT", "TEXT_PAIR")   # TEXT_PAIR optional (the config says so)

    def __init__(self, here: str, p: dict[str, str]) -> None:
        self.core = ClassifierCore.from_folder(here, p)

    def parse(self, arrays, params, asked) -> Item:
        t, pair = arrays.get("TEXT"), arrays.get("TEXT_PAIR")
        if t is None:
            raise InputError("a classifier request needs TEXT (one row per text; TEXT_PAIR beside it for pairs)", "TEXT")
        limit = self.core.cfg.max_text_bytes
        return Item(PairRequest(decode_texts(t, limit), None if pair is None else decode_texts(pair, limit),
                                self.core.options(params)))

    def outputs(self, item, out):
        return [("SCORES", out.scores), ("TOKENS", out.tokens.reshape(-1, 1))]
