"""ONNX Runtime session for an encoder, configured from the model's parameters."""

from __future__ import annotations

import numpy as np


def make_session(onnx_path: str, intra_threads: int = 0, inter_threads: int = 1, spinning: bool = False,
                 optimize: bool = True, arena: bool = True):
    """CPU session. Spinning is off by default: measured under tritonserver on 2 cores,
    spinning intra-op threads stalled about 5% of requests by ~500 ms (p99 516 ms vs 14 ms
    without), as they compete with the server and the other stubs for the cores.
    optimize=False runs the graph exactly as written (the bf16 simulation's round-trip casts
    must not be optimized away). arena=False returns each run's memory to the system instead of
    keeping the peak cached (long buckets: one 16K-token run of a tiny BERT peaks at 6.4 GB with
    the arena and memory patterns, 5.5 GB without, and is then given back)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if not arena:
        so.enable_cpu_mem_arena = False
        so.enable_mem_pattern = False
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if intra_threads > 0:
        so.intra_op_num_threads = intra_threads
    so.inter_op_num_threads = max(1, inter_threads)
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(onnx_path, sess_options=so, providers=["CPUExecutionProvider"])


class OrtEncoder:
    thread_safe = True   # InferenceSession.run may be called from several threads at once

    def __init__(self, onnx_path: str, intra_threads: int = 0, spinning: bool = False, optimize: bool = True,
                 arena: bool = True) -> None:
        self.session = make_session(onnx_path, intra_threads, spinning=spinning, optimize=optimize, arena=arena)
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.output_name = self.session.get_outputs()[0].name

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run([self.output_name], {k: feeds[k] for k in self.input_names})[0]


def balanced_parts(lengths: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Cut rows (in their given order) into at most `parts` contiguous [start, end) ranges that
    minimise the largest range cost, cost = rows x longest row (what a padded run computes).
    Binary search on the cost bound with a greedy fill, which is exact for this monotone cost."""
    n = len(lengths)
    if n == 0:
        return []
    lens = [max(1, int(x)) for x in lengths]

    def fill(bound: int) -> list[tuple[int, int]] | None:
        out, start, longest = [], 0, 0
        for i, length in enumerate(lens):
            longest_next = max(longest, length)
            if (i - start + 1) * longest_next > bound:
                if i == start:
                    return None
                out.append((start, i))
                start, longest_next = i, length
            longest = longest_next
        out.append((start, n))
        return out if len(out) <= parts else None

    lo, hi = max(lens), n * max(lens)
    while lo < hi:
        mid = (lo + hi) // 2
        if fill(mid) is None:
            lo = mid + 1
        else:
            hi = mid
    return fill(lo) or [(0, n)]


def pad_single_row(feeds: dict[str, np.ndarray], step: int, cap: int = 0) -> dict[str, np.ndarray]:
    """A lone unpadded row, right-padded (mask 0) to the next multiple of `step` tokens, so single
    texts of different lengths share a few input shapes. Measured with OpenVINO bf16 on MiniLM, one
    row: 28 different lengths in random order 3.57 ms per run, always 32 tokens 2.25 ms (re-preparing
    the dynamic-shape graph for a new shape costs more than the padded compute).
    `cap` (the model's max length, where set): never padded past it (77 tokens padded to 96 would overrun
    a 77-position model)."""
    mask = feeds["attention_mask"]
    if step <= 0 or mask.shape[0] != 1 or mask.shape[1] % step == 0 or not mask.all():
        return feeds
    extra = -mask.shape[1] % step
    if cap > 0:
        extra = min(extra, max(0, cap - mask.shape[1]))
    if extra == 0:
        return feeds
    return {k: np.pad(v, ((0, 0), (0, extra))) for k, v in feeds.items()}


def trim_padding(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Drop sequence columns that are padding in every row (right or left padding alike)."""
    cols = np.nonzero(feeds["attention_mask"].any(axis=0))[0]
    if cols.size == 0 or (cols[0] == 0 and cols[-1] == feeds["attention_mask"].shape[1] - 1):
        return feeds
    return {k: v[:, cols[0]:cols[-1] + 1] for k, v in feeds.items()}


class OpenVinoEncoder:
    """The same ONNX graph compiled by OpenVINO's CPU plugin: fp32, or bf16 (AMX / AVX-512
    bf16 where the CPU has them; OpenVINO keeps its own precision-sensitive ops in fp32).

    Parallelism across rows, not inside ops: `streams` single-threaded streams (one per core
    by default) each run a slice of the batch, cut so the slices cost about the same and each
    padded only to its own longest row. Measured on 2 cores, this beat one 2-thread stream
    (whose threads meet at a barrier after every op, so any other process on either core
    stalls both). One text runs on one stream."""

    def __init__(self, onnx_path: str, precision: str = "fp32", intra_threads: int = 0, length_step: int = 32,
                 trim: bool = True, max_length: int = 0) -> None:
        import os

        import openvino as ov

        if precision not in ("fp32", "bf16"):
            raise ValueError(f"python-openvino runs fp32 or bf16, not {precision}")
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.streams = intra_threads if intra_threads > 0 else cores
        self.length_step, self.max_length = length_step, max_length
        # trim: columns no row attends are dropped before the run; not for a model whose unattended
        # positions have outputs (a ColBERT query's expansion)
        self.trim = trim_padding if trim else (lambda feeds: feeds)
        core = ov.Core()
        model = core.read_model(onnx_path)
        self.input_names = tuple(p.get_any_name() for p in model.inputs)
        self.compiled = core.compile_model(model, "CPU", {
            "INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32",
            "PERFORMANCE_HINT": "THROUGHPUT",
            "NUM_STREAMS": self.streams,
            "INFERENCE_NUM_THREADS": self.streams,
        })
        self.precision = str(self.compiled.get_property("INFERENCE_PRECISION_HINT"))
        self.requests = [self.compiled.create_infer_request() for _ in range(self.streams)]

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        feeds = {k: feeds[k] for k in self.input_names}
        mask = feeds.get("attention_mask")
        if mask is None:   # fixed-size rows (an image tower's pixels): split evenly over the streams, as they are
            rows = next(iter(feeds.values())).shape[0]
            return self._run(feeds, balanced_parts(np.ones(rows, np.int64), min(self.streams, rows)), lambda f: f)
        return self._run(feeds, balanced_parts(mask.sum(axis=1), min(self.streams, mask.shape[0])), None)

    def _run(self, feeds: dict[str, np.ndarray], ranges: list[tuple[int, int]], as_is) -> np.ndarray:
        """The rows' ranges on the streams; `as_is` (fixed-size rows): no column trimming or padding."""
        trim = as_is or self.trim
        pad = as_is or (lambda f: pad_single_row(f, self.length_step, self.max_length))
        if len(ranges) == 1:
            self.requests[0].infer(pad(trim(feeds)))
            # The output tensor is the request's own buffer, overwritten by the next call.
            return np.array(self.requests[0].get_output_tensor(0).data, dtype=np.float32, copy=True)
        for req, (a, b) in zip(self.requests, ranges):
            req.start_async(trim({k: v[a:b] for k, v in feeds.items()}))
        outs = []
        for req in self.requests[:len(ranges)]:
            req.wait()
            outs.append(np.array(req.get_output_tensor(0).data, dtype=np.float32, copy=True))
        return np.concatenate(outs)


def make_encoder(p: dict[str, str], onnx_path: str | None, hf_dir: str | None, trust_remote_code: bool = False):
    """The encoder a Python-backend model runs, from its config parameters (the build's
    parity gate calls this too, so it checks exactly what is served)."""
    threads = int(p.get("intra_op_threads", "0"))
    if p.get("runtime") == "openvino":
        return OpenVinoEncoder(str(onnx_path), p.get("precision", "fp32"), threads,
                               trim=p.get("trim_padding", "true") == "true", max_length=int(p.get("max_seq_length", "0")))
    if p.get("runtime", "onnxruntime") == "torch":
        from .torch_encoder import torch_encoder

        return torch_encoder(p, str(hf_dir), threads, trust_remote_code)
    return OrtEncoder(str(onnx_path), threads, spinning=p.get("ort_spinning") == "true",
                      optimize=p.get("ort_optimize", "true") == "true", arena=p.get("ort_arena", "true") == "true")


def encoder_from_parameters(folder: str, p: dict[str, str]):
    """A model folder's encoder: 1/model.onnx or 1/hf/, as the parameters say (python-torch: the
    model's own code runs only where the build rendered trust_remote_code)."""
    import os

    return make_encoder(p, os.path.join(folder, "model.onnx"), os.path.join(folder, "hf"),
                        p.get("trust_remote_code") == "true")
