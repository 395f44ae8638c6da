"""Encoder inside the Python backend (any tritonserver with it): ONNX Runtime or PyTorch."""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embtrt_backend.deps import use_bundle  # noqa: E402

use_bundle(os.path.dirname(os.path.abspath(__file__)))  # the repository's own packages, before importing them

from embtrt_backend.host import instances_of, size_threads  # noqa: E402
from embtrt_backend.batching import parameters, split_rows  # noqa: E402
from embtrt_backend.encoder import encoder_from_parameters  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        cfg = parameters(args["model_config"])
        p = size_threads(cfg, instances_of(json.loads(args["model_config"])))   # embtrt_backend.host
        here = os.path.dirname(os.path.abspath(__file__))
        self.encoder = encoder_from_parameters(here, p)
        self.output_name = p["encoder_output"]
        self.names = tuple(p["input_names"].split(","))

    def execute(self, requests):
        names = self.names
        feeds = [{n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in names} for r in requests]
        responses = [None] * len(requests)
        # The dynamic batcher merges requests of one shape; group by shape to stay correct anyway.
        groups = {}
        for i, f in enumerate(feeds):
            groups.setdefault(f["input_ids"].shape[1:], []).append(i)
        for idx in groups.values():
            batch = {n: np.concatenate([feeds[i][n] for i in idx]) for n in names}
            try:
                out = self.encoder.run(batch)
            except Exception as exc:  # ORT / torch raise their own types; the request fails, the model serves on
                for i in idx:
                    responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"encoder: {exc}"))
                continue
            parts = split_rows(out, [feeds[i]["input_ids"].shape[0] for i in idx])
            for i, part in zip(idx, parts):
                responses[i] = pb_utils.InferenceResponse([pb_utils.Tensor(self.output_name, part)])
        return responses
