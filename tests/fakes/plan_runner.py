"""Runs a plan "built" by the fake tensorrt module (tests/fakes/tensorrt): its header names the
profile, its body is the ONNX it was parsed from, executed with ONNX Runtime. It checks each
batch against the plan's optimization profile, as an engine would."""

import json
import tempfile
from pathlib import Path

import numpy as np


class OrtPlanRunner:
    noise = 0.0  # a test sets another value to make the "plan" differ from its ONNX

    def __init__(self, plan):
        import onnxruntime as ort

        header, body = Path(plan).read_bytes().split(b"\n", 1)
        self.shapes = json.loads(header)["shapes"]
        with tempfile.NamedTemporaryFile(suffix=".onnx", delete=False) as f:
            f.write(body)
        self.session = ort.InferenceSession(f.name, providers=["CPUExecutionProvider"])
        Path(f.name).unlink()

    def run(self, feeds, output):
        for name, arr in feeds.items():
            (mn, _, mx) = self.shapes[name]
            if not (mn[0] <= arr.shape[0] <= mx[0] and arr.shape[1] == mn[1] == mx[1]):
                raise ValueError(f"{name} shape {arr.shape} is outside the profile {mn}..{mx}")
        got = self.session.run([output], dict(feeds))[0]
        got = np.asarray(got, dtype=np.float32)
        return got + self.noise * np.random.default_rng(0).standard_normal(got.shape).astype(np.float32)

    def close(self):
        pass
