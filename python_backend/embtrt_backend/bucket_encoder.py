"""How a front door runs its encoder for one bucket's chunk: itself, or over BLS.

encoder_mode "local" (python-ort, python-openvino, python-torch): the front door holds the
encoder (embtrt_backend.encoder) and runs it in its own stub, one stub round trip less per chunk.
encoder_mode "bls" (onnxruntime, tensorrt, or --router-encoder bls): each bucket's rows go to
that bucket's encoder model (`encoder_models`, one per bucket, in bucket order), whose output
`encoder_output` is returned. The embedder, reranker and sparse front doors all call this.

pb_utils is passed in (Triton's module exists only inside the server), so that this file
imports without Triton.
"""

from __future__ import annotations

import numpy as np


class BucketEncoder:
    def __init__(self, folder: str, p: dict[str, str], buckets: tuple[int, ...], pb_utils=None) -> None:
        self.mode = p.get("encoder_mode", "local")
        if self.mode not in ("local", "bls"):
            raise ValueError(f"encoder_mode {self.mode!r}: must be local or bls")
        self.output_name = p["encoder_output"]
        self.input_names = tuple(p["input_names"].split(","))
        self.local = None
        self.models: dict[int, str] = {}
        if self.mode == "local":
            from .encoder import encoder_from_parameters

            self.local = encoder_from_parameters(folder, p)
            return
        names = [n for n in p.get("encoder_models", "").split(",") if n]
        if len(names) != len(buckets):
            raise ValueError(f"encoder_mode bls needs one encoder model per bucket: {len(buckets)} buckets, "
                             f"encoder_models {p.get('encoder_models', '')!r}")
        if pb_utils is None:
            raise ValueError("encoder_mode bls runs inside tritonserver only (pb_utils is missing)")
        self.models = dict(zip(buckets, names))
        self.pb = pb_utils

    @property
    def thread_safe(self) -> bool:
        """May two threads call it at once (a BLS call, an ONNX Runtime session; not OpenVINO's infer
        requests or a PyTorch module)?"""
        return self.local is None or bool(getattr(self.local, "thread_safe", False))

    def __call__(self, bucket: int, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """One chunk of one bucket through its encoder (synchronous BLS: measured steadier than an
        async execute under the Python backend)."""
        if self.local is not None:
            return self.local.run(feeds)
        pb = self.pb
        model = self.models[bucket]
        inputs = [pb.Tensor(n, feeds[n]) for n in self.input_names]
        resp = pb.InferenceRequest(model_name=model, requested_output_names=[self.output_name], inputs=inputs).exec()
        if resp.has_error():
            raise RuntimeError(f"encoder {model}: {resp.error().message()}")
        return pb.get_output_tensor_by_name(resp, self.output_name).as_numpy()
