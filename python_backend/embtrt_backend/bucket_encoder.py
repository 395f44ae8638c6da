"""How a front door runs its encoder for one bucket's chunk: itself, or over BLS.

encoder_mode "local" (python-ort, python-openvino, python-torch): the front door holds the
encoder (embtrt_backend.encoder) and runs it in its own stub, one stub round trip less per chunk.
encoder_mode "bls" (onnxruntime, tensorrt, or --router-encoder bls): each bucket's rows go to
that bucket's encoder model (`encoder_models`, one per bucket, in bucket order), whose output
`encoder_output` is returned. The embedder, reranker and sparse front doors all call this.

A model of two towers (a text-and-image embedder) names its other towers in `towers` ("image"): `tower(name)`
runs one, locally from `<name>.onnx` beside the text graph (python-torch: the same PyTorch model's other
tower), or over BLS to the model `tower_<name>_model` (its output `tower_<name>_output`).

pb_utils is passed in (Triton's module exists only inside the server), so that this file
imports without Triton.
"""

from __future__ import annotations

import os

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
        self.towers: dict[str, object] = {}
        names = [t for t in p.get("towers", "").split(",") if t]
        if self.mode == "local":
            from .encoder import encoder_from_parameters, make_encoder

            self.local = encoder_from_parameters(folder, p)
            for t in names:   # python-torch: a view of the one model; else the tower's own graph
                tower = getattr(self.local, "tower", None)
                self.towers[t] = tower(t) if tower is not None else make_encoder(
                    p, os.path.join(folder, f"{t}.onnx"), None, False)
            return
        names = [n for n in p.get("encoder_models", "").split(",") if n]
        if len(names) != len(buckets):
            raise ValueError(f"encoder_mode bls needs one encoder model per bucket: {len(buckets)} buckets, "
                             f"encoder_models {p.get('encoder_models', '')!r}")
        if pb_utils is None:
            raise ValueError("encoder_mode bls runs inside tritonserver only (pb_utils is missing)")
        self.models = dict(zip(buckets, names))
        self.pb = pb_utils
        for t in [t for t in p.get("towers", "").split(",") if t]:
            self.towers[t] = (p[f"tower_{t}_model"], p[f"tower_{t}_output"])

    def tower(self, name: str):
        """The tower `name` as a function feeds -> its output [rows, dim]."""
        if name not in self.towers:
            raise ValueError(f"this model has no {name} tower (towers: {', '.join(self.towers) or 'none'})")
        t = self.towers[name]
        if not isinstance(t, tuple):
            return t.run
        model, output = t
        return lambda feeds: self._bls(model, output, feeds, tuple(feeds))

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
        return self._bls(self.models[bucket], self.output_name, feeds, self.input_names)

    def _bls(self, model: str, output: str, feeds: dict[str, np.ndarray], names) -> np.ndarray:
        pb = self.pb
        inputs = [pb.Tensor(n, feeds[n]) for n in names]
        resp = pb.InferenceRequest(model_name=model, requested_output_names=[output], inputs=inputs).exec()
        if resp.has_error():
            raise RuntimeError(f"encoder {model}: {resp.error().message()}")
        return pb.get_output_tensor_by_name(resp, output).as_numpy()
