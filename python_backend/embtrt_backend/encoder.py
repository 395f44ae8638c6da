"""ONNX Runtime session for an encoder, configured from the model's parameters."""

from __future__ import annotations

import numpy as np


def make_session(onnx_path: str, intra_threads: int = 0, inter_threads: int = 1, spinning: bool = False):
    """CPU session. Spinning is off by default: measured under tritonserver on 2 cores,
    spinning intra-op threads stalled about 5% of requests by ~500 ms (p99 516 ms vs 14 ms
    without), as they compete with the server and the other stubs for the cores."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if intra_threads > 0:
        so.intra_op_num_threads = intra_threads
    so.inter_op_num_threads = max(1, inter_threads)
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(onnx_path, sess_options=so, providers=["CPUExecutionProvider"])


class OrtEncoder:
    def __init__(self, onnx_path: str, intra_threads: int = 0, spinning: bool = False) -> None:
        self.session = make_session(onnx_path, intra_threads, spinning=spinning)
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.output_name = self.session.get_outputs()[0].name

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run([self.output_name], {k: feeds[k] for k in self.input_names})[0]


def make_encoder(p: dict[str, str], onnx_path: str | None, hf_dir: str | None, trust_remote_code: bool = False):
    """The encoder a Python-backend model runs, from its config parameters (the build's
    parity gate calls this too, so it checks exactly what is served)."""
    threads = int(p.get("intra_op_threads", "0"))
    if p.get("runtime", "onnxruntime") == "torch":
        from .torch_encoder import TorchEncoder

        return TorchEncoder(str(hf_dir), p["precision"], threads, p["pooling"], p["normalize"] == "true",
                            p["pooler"] == "fused", trust_remote_code)
    return OrtEncoder(str(onnx_path), threads, spinning=p.get("ort_spinning") == "true")


def encoder_from_parameters(folder: str, p: dict[str, str]):
    """A model folder's encoder: 1/model.onnx or 1/hf/, as the parameters say."""
    import os

    return make_encoder(p, os.path.join(folder, "model.onnx"), os.path.join(folder, "hf"))
