"""The embedder's front door: the pooled-vector door (embtrt_backend.doors.pooled) on the embedder's inputs, and
late chunking (embtrt_backend.late_chunks): the request parameter `late_chunking` true makes the TEXT rows the
chunks of one document, embedded in one pass, one vector per chunk."""

from __future__ import annotations

from ... import InputError
from ...doors.base import Item
from ...doors.pooled import PooledDoor
from ...late_chunks import LateCore, LateRequest
from ...text import decode_texts
from . import KIND as EMBEDDER

LATE = "late_chunking"


class EmbedderDoor(PooledDoor):
    inputs = EMBEDDER.inputs
    _late = None   # the late-chunking core, made on first use

    def pass_bytes(self, rows: list[int], params: dict) -> list[int]:
        """A late-chunking request is one pass over all its rows (the long-text lane takes it by their sum)."""
        return [sum(rows) + len(rows)] if params and params.get(LATE) is True else rows

    def parse(self, arrays, params, asked) -> Item:
        if not params or LATE not in params:
            return super().parse(arrays, params, asked)
        params = dict(params)
        late = params.pop(LATE)
        if not isinstance(late, bool):
            raise InputError(f"invalid {LATE}: must be a boolean, got {type(late).__name__} {late!r}", LATE)
        if not late:
            return super().parse(arrays, params, asked)
        for k in ("prompt_name", "input_type"):
            if params.get(k) is not None:
                raise InputError(f"{k}: late chunking embeds the document as it is, a prompt would be context no chunk "
                                 "owns; send the request without it", k)
        texts = decode_texts(arrays["TEXT"], self.core.cfg.max_text_bytes)
        if not texts:
            raise InputError("TEXT holds no rows")
        return Item(LateRequest(texts, self.request_options(params, asked)))

    def run(self, items, encode) -> list:
        """Late-chunking requests through their own core, the others as every embedder's; outcomes in order."""
        late = [i for i, it in enumerate(items) if isinstance(it.work, LateRequest)]
        if not late:
            return self.core.run([it.work for it in items], encode)
        if self._late is None:
            self._late = LateCore(self.core)
        out: list = [None] * len(items)
        rest = sorted(set(range(len(items))) - set(late))
        for idx, core in ((rest, self.core), (late, self._late)):
            if idx:
                for i, o in zip(idx, core.run([items[i].work for i in idx], encode), strict=True):
                    out[i] = o
        return out
