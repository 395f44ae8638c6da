"""The floor of the request path: a model with the front door's TEXT -> EMBEDDING signature and no
encoder (zeros of the width asked). Load generators are measured against it (embtrt.measure.floor):
what a generator drives here is the most it can drive on that machine, whatever the model."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json

        cfg = json.loads(args["model_config"])
        self.dim = int(cfg["output"][0]["dims"][0])

    def execute(self, requests):
        out = []
        for r in requests:
            rows = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy().shape[0]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("EMBEDDING", np.zeros((rows, self.dim), np.float32))]))
        return out
