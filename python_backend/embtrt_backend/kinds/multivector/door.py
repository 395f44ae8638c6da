"""The multi-vector encoder's front door: TEXT -> the multi-vector core -> each text's token vectors,
TOKEN_EMBEDDINGS (FP32 [rows, max_tokens, dim], zero-padded to the request's longest) and TOKEN_COUNTS
(INT64 [rows, 1]: how many are real), and TOKENS per text; a bge-m3 model adds DENSE (FP32 [rows,
hidden]) and its lexical weights as SPARSE_INDICES (INT64 token ids ascending, -1 padding) and
SPARSE_VALUES (FP32), the sparse kind's layout. A request gets the outputs it asks for by name (none
named: all), from one encoder pass.

Parameters (kinds.multivector.core.resolve): input_type query | document (encode_query /
encode_document; default document), prompt_name, truncate END / START / NONE."""

from __future__ import annotations

import numpy as np

from ... import InputError
from ...doors.base import Door, Item
from ...text import decode_texts
from . import KIND as MULTIVECTOR
from .core import MultiVectorCore, MultiVectorRequest, padded

M3_OUTPUTS = ("DENSE", "SPARSE_INDICES", "SPARSE_VALUES")


class MultiVectorDoor(Door):
    inputs = MULTIVECTOR.inputs

    def __init__(self, here: str, p: dict[str, str]) -> None:
        self.core = MultiVectorCore.from_folder(here, p)

    def parse(self, arrays, params, asked) -> Item:
        texts = decode_texts(arrays["TEXT"], self.core.cfg.max_text_bytes)
        if not texts:
            raise InputError("TEXT holds no rows")
        asked = set(asked or ())
        vectors = not asked or "TOKEN_EMBEDDINGS" in asked or "TOKEN_COUNTS" in asked
        return Item(MultiVectorRequest(texts, self.core.options(params), vectors), extra=asked)

    def outputs(self, item, out):
        asked, mv = item.extra, self.core.mv
        wants = lambda *names: not asked or any(n in asked for n in names)
        res = []
        if wants("TOKEN_EMBEDDINGS", "TOKEN_COUNTS"):
            emb, counts = padded(out.vectors, mv.dim)
            res += [("TOKEN_EMBEDDINGS", emb), ("TOKEN_COUNTS", counts)]
        if mv.m3:
            if wants("DENSE"):
                res.append(("DENSE", out.dense))
            if wants("SPARSE_INDICES", "SPARSE_VALUES"):
                width = max((len(i) for i, _ in out.sparse), default=0)
                idx = np.full((len(out.sparse), width), -1, dtype=np.int64)
                val = np.zeros((len(out.sparse), width), dtype=np.float32)
                for r, (i, v) in enumerate(out.sparse):
                    idx[r, :len(i)], val[r, :len(v)] = i, v
                res += [("SPARSE_INDICES", idx), ("SPARSE_VALUES", val)]
        return res + [("TOKENS", out.tokens.reshape(-1, 1))]
