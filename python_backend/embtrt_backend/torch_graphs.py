"""Static shapes for the PyTorch encoder on CUDA: one CUDA graph per (bucket, batch size).

A python-torch front door built with `--device cuda` pads every row to its bucket (as TensorRT
plans do), so each encoder run has the shape (rows, bucket). At load, for every bucket and every
batch size the batcher forms (powers of two up to the bucket's max batch, and the max itself),
the forward pass (model, pooling, normalisation: one fp32 output per row) is warmed up and
captured as a CUDA graph on static input buffers; the model reports ready only after every graph
was captured and replayed once. A run of R rows is padded up to the nearest captured batch size
(the padding rows repeat the first row, so they attend real tokens and cost no special case),
copied into the graph's input buffers through pinned host memory, replayed, and its first R output
rows copied back. A shape no graph covers (a row longer than its bucket cannot happen; more rows
than the largest size can, where a caller bypasses the plan) runs eagerly.

All graphs of one instance share one memory pool and one stream and are replayed one at a time, an
output copied to the host before the next replay: a later graph may reuse memory an earlier one
freed after its capture, never while its output is still to be read.

On a machine without CUDA the same bookkeeping runs with `capture=False`: the static buffers, the
padding and the copies are exercised, and the forward runs eagerly on them (the CPU stand-in the
tests and the GPU kit's dry run use). Only `torch.cuda.CUDAGraph` itself needs the GPU.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def graph_batch_sizes(max_batch: int) -> tuple[int, ...]:
    """The batch sizes captured for a bucket: 1, 2, 4, ... below max_batch, and max_batch."""
    if max_batch < 1:
        raise ValueError(f"max_batch {max_batch}: must be at least 1")
    sizes, b = [], 1
    while b < max_batch:
        sizes.append(b)
        b *= 2
    return (*sizes, max_batch)


def parse_graph_shapes(text: str) -> dict[int, tuple[int, ...]]:
    """'32:1,2,4;128:1,2' (the `graph_shapes` parameter) -> {32: (1, 2, 4), 128: (1, 2)}."""
    out: dict[int, tuple[int, ...]] = {}
    for part in filter(None, text.split(";")):
        bucket, _, sizes = part.partition(":")
        out[int(bucket)] = tuple(sorted(int(s) for s in sizes.split(",") if s))
        if not out[int(bucket)]:
            raise ValueError(f"graph_shapes {text!r}: bucket {bucket} has no batch size")
    return out


def format_graph_shapes(shapes: dict[int, tuple[int, ...]]) -> str:
    return ";".join(f"{b}:{','.join(map(str, sizes))}" for b, sizes in sorted(shapes.items()))


def padded_rows(rows: int, sizes: tuple[int, ...]) -> int | None:
    """The smallest captured batch size that holds `rows`, or None (more rows than any)."""
    return next((s for s in sizes if s >= rows), None)


def pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
    """x [R, ...] with rows R..rows-1 copies of row 0."""
    if x.shape[0] == rows:
        return x
    return np.concatenate([x, np.repeat(x[:1], rows - x.shape[0], axis=0)])


class StaticShape:
    """One (rows, length) shape: device input buffers, pinned host staging, the captured graph (or
    the eager forward on the same buffers, capture=False), its output and a pinned host copy."""

    def __init__(self, torch, forward: Callable[[dict], object], rows: int, length: int,
                 input_names: tuple[str, ...], device: str, capture: bool, pool=None, stream=None,
                 extra: dict[str, tuple[int, ...]] | None = None, fill: dict[str, np.ndarray] | None = None) -> None:
        self.torch, self.forward, self.rows, self.length, self.capture = torch, forward, rows, length, capture
        pin = capture   # pinned host memory only where there is a device to copy to
        self.staging = {n: torch.zeros((rows, length), dtype=torch.int64, pin_memory=pin) for n in input_names}
        self.inputs = {n: torch.zeros((rows, length), dtype=torch.int64, device=device) for n in input_names}
        for n, tail in (extra or {}).items():   # float inputs of a fixed shape per row (a page's pixel_values)
            self.staging[n] = torch.zeros((rows, *tail), dtype=torch.float32, pin_memory=pin)
            self.inputs[n] = torch.zeros((rows, *tail), dtype=torch.float32, device=device)
        self.inputs["attention_mask"][:, 0] = 1   # warm-up and capture attend one token per row
        for n, row in (fill or {}).items():   # a run's fixed values (a page's sequence: its image tokens must be there)
            self.inputs[n][:] = torch.as_tensor(np.asarray(row), dtype=self.inputs[n].dtype)
        self.graph = None
        if capture:
            # the buffers above (and the model's cast to the device) were queued on the current
            # stream; a side stream does not wait for it by itself
            torch.cuda.synchronize()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):   # warm-up off the capture stream, as torch requires
                for _ in range(2):
                    forward(self.inputs)
            (stream or torch.cuda.current_stream()).wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, pool=pool, stream=stream):
                self.output = forward(self.inputs)
            self.graph.replay()
            torch.cuda.synchronize()
        else:
            self.output = forward(self.inputs)
        self.host = torch.empty(tuple(self.output.shape), dtype=torch.float32, pin_memory=pin)

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        torch = self.torch
        rows = feeds["attention_mask"].shape[0]
        for name, buf in self.inputs.items():
            kind = np.int64 if buf.dtype == torch.int64 else np.float32
            self.staging[name].numpy()[:] = pad_rows(np.asarray(feeds[name], dtype=kind), self.rows)
            buf.copy_(self.staging[name], non_blocking=self.capture)
        if self.graph is not None:
            self.graph.replay()
        else:
            self.output = self.forward(self.inputs)
        self.host.copy_(self.output, non_blocking=self.capture)
        if self.capture:
            torch.cuda.current_stream().synchronize()
        return self.host.numpy()[:rows].copy()


class GraphSet:
    """Every static shape of one instance, by (bucket length, batch size), captured largest first
    (the shared pool is sized by the first capture)."""

    def __init__(self, torch, forward: Callable[[dict], object], shapes: dict[int, tuple[int, ...]],
                 input_names: tuple[str, ...], device: str, capture: bool,
                 extra: dict[str, tuple[int, ...]] | None = None, fill: dict[str, np.ndarray] | None = None) -> None:
        if "attention_mask" not in input_names:
            raise ValueError(f"input names {input_names}: the graphs need an attention_mask")
        self.torch, self.input_names = torch, frozenset(input_names) | frozenset(extra or ())
        self.required = frozenset(extra or ())   # a run must feed these (a page's pixel_values) to be this set's
        self.shapes = {b: tuple(sorted(s)) for b, s in shapes.items()}
        self.stream = torch.cuda.Stream() if capture else None
        pool = torch.cuda.graph_pool_handle() if capture else None
        self.graphs: dict[tuple[int, int], StaticShape] = {}
        for length in sorted(self.shapes, reverse=True):
            for rows in sorted(self.shapes[length], reverse=True):
                self.graphs[(length, rows)] = StaticShape(torch, forward, rows, length, input_names, device,
                                                          capture, pool, self.stream, extra, fill)
        self.replays = 0   # runs served by a static shape
        self.eager = 0     # runs no static shape covers (run eagerly by the caller)

    def covers(self, rows: int, length: int) -> tuple[int, int] | None:
        """The static shape a run of (rows, length) is padded to, or None (it runs eagerly)."""
        sizes = self.shapes.get(length)
        if sizes is None:
            return None
        padded = padded_rows(rows, sizes)
        return None if padded is None else (length, padded)

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray | None:
        """A run on its static shape -> its output; None where none covers it, or where it feeds more than the
        shapes' inputs (a page's pixel_values beside a query's inputs: only the eager forward reads them)."""
        rows, length = feeds["attention_mask"].shape
        ok = self.input_names.issuperset(feeds) and self.required.issubset(feeds)
        key = self.covers(rows, length) if ok else None
        if key is None:
            self.eager += 1
            return None
        self.replays += 1
        if self.stream is None:
            return self.graphs[key](feeds)
        with self.torch.cuda.stream(self.stream):   # this instance's own stream
            return self.graphs[key](feeds)
