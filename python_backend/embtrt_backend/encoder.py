"""ONNX Runtime session for an encoder, configured from the model's parameters."""

from __future__ import annotations

import numpy as np


def make_session(onnx_path: str, intra_threads: int = 0, inter_threads: int = 1):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if intra_threads > 0:
        so.intra_op_num_threads = intra_threads
    so.inter_op_num_threads = max(1, inter_threads)
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(onnx_path, sess_options=so, providers=["CPUExecutionProvider"])


class OrtEncoder:
    def __init__(self, onnx_path: str, intra_threads: int = 0) -> None:
        self.session = make_session(onnx_path, intra_threads)
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.output_name = self.session.get_outputs()[0].name

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run([self.output_name], {k: feeds[k] for k in self.input_names})[0]
