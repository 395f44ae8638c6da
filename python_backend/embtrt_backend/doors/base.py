"""What a kind's front door does with a request, without Triton (python_backend/router/model.py is
the one front door of every kind: it reads the inputs, answers through pb_utils, and asks the
kind's Door for the rest).

A Door turns a request's input arrays and parameters into an Item (the work its core runs, or
outputs already made), runs a batch of items on the encoder, and names the outputs of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

Outputs = list[tuple[str, np.ndarray]]   # (output name, array), in the config's order; TOKENS last


@dataclass
class Item:
    work: Any = None                 # what the kind's core runs (a Request, a PairRequest)
    ready: Outputs | None = None     # outputs made without the encoder (an inference-free query)
    extra: Any = None                # what outputs() needs besides the core's outcome


class Door:
    """The base: `inputs` (the kind's, embtrt_backend.kinds) and the core's `run`."""

    inputs: tuple[str, ...] = ()
    image_input = ""   # the input of encoded images, where the kind takes them (Kind.image_input): never long text
    core: Any

    @property
    def buckets(self) -> tuple[int, ...]:
        return self.core.cfg.buckets

    def row_bytes(self, arrays: dict[str, np.ndarray]) -> list[int]:
        """Each row's UTF-8 bytes (which bound its tokens), for the long-text lane."""
        rows = [a.ravel() for name, a in arrays.items() if a is not None and name != self.image_input]
        if not rows:   # an image request
            return []
        if len(rows) == 1:
            return [len(t) for t in rows[0]]
        return [sum(len(t) for t in row) for row in zip(*rows)]   # a pair's texts together

    def pass_bytes(self, rows: list[int], params: dict) -> list[int]:
        """The UTF-8 bytes of each encoder pass the request's rows make (`rows`: row_bytes): one pass per row,
        unless its options join the rows (late chunking: one pass over them all)."""
        return rows

    def parse(self, arrays: dict[str, np.ndarray | None], params: dict, asked: list[str]) -> Item:
        raise NotImplementedError

    def run(self, items: list[Item], encode: Callable) -> list:
        """Each item's outcome (its `error`, or what outputs() reads), in order."""
        return self.core.run([it.work for it in items], encode)

    def outputs(self, item: Item, out) -> Outputs:
        raise NotImplementedError
