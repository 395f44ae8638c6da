"""A stand-in for the one part of an onnxruntime-target repository the bundled tritonserver cannot load.

nvidia-pytriton's tritonserver ships the Python backend only (../shared/FINDINGS.md), so the encoder models an
onnxruntime build renders (`backend: "onnxruntime"`: one per text bucket, and a text-and-image model's image
tower) cannot run here. `served_copy` copies the repository and gives each of those models a Python model that
runs the same `model.onnx` in ONNX Runtime with the same config (name, inputs, outputs, batching); everything
else (the front door, its BLS calls, the tokenizer, the pooling) is served as built. What it cannot show is
Triton's onnxruntime backend itself (its thread and graph-level parameters, the TensorRT accelerator)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

MODEL_PY = '''"""Stand-in for Triton's onnxruntime backend (tests/ort_standin.py): model.onnx in ONNX Runtime."""
import json
import os

import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        here = os.path.join(args["model_repository"], args["model_version"])
        graph = next(os.path.join(here, f) for f in sorted(os.listdir(here)) if f.endswith(".onnx"))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        self.session = ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])
        self.inputs = [i["name"] for i in cfg["input"]]
        self.outputs = [o["name"] for o in cfg["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            feed = {}
            for name in self.inputs:
                t = pb_utils.get_input_tensor_by_name(request, name)
                if t is not None:
                    feed[name] = t.as_numpy()
            got = self.session.run(self.outputs, feed)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(n, v) for n, v in zip(self.outputs, got)]))
        return responses
'''


def onnxruntime_models(repo: Path) -> list[str]:
    """The models of a repository that Triton's onnxruntime backend would run."""
    return sorted(p.parent.name for p in repo.glob("*/config.pbtxt") if 'backend: "onnxruntime"' in p.read_text())


def served_copy(repo: Path, dest: Path) -> tuple[Path, list[str]]:
    """(a copy of `repo` whose onnxruntime models run in the stand-in, the names of those models)."""
    shutil.copytree(repo, dest, symlinks=False)
    names = onnxruntime_models(dest)
    for name in names:
        cfg = dest / name / "config.pbtxt"
        text = cfg.read_text().replace('backend: "onnxruntime"', 'backend: "python"')
        text = re.sub(r"\noptimization \{.*?\n\}", "", text, flags=re.S)   # the onnxruntime backend's own section
        cfg.write_text(text)
        (dest / name / "1" / "model.py").write_text(MODEL_PY)
    return dest, names
