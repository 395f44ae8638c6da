"""Pooler: last_hidden_state + attention_mask -> pooled (and L2-normalized) EMBEDDING."""

import os
import sys

import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embtrt_backend.deps import use_bundle  # noqa: E402

use_bundle(os.path.dirname(os.path.abspath(__file__)))  # the repository's own packages, before importing them

from embtrt_backend.batching import parameters  # noqa: E402
from embtrt_backend.drain import Drain  # noqa: E402
from embtrt_backend.pooling import pool_and_normalize  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        self.drain = Drain(track=True)
        p = parameters(args["model_config"])
        self.pooling = p["pooling"]
        self.normalize = p["normalize"] == "true"

    def execute(self, requests):
        self.drain.enter()   # an ensemble's last step: never refused, listed while it runs (embtrt_backend.drain)
        try:
            return self._execute(requests)
        finally:
            self.drain.end()

    def _execute(self, requests):
        responses = []
        for request in requests:
            hidden = pb_utils.get_input_tensor_by_name(request, "last_hidden_state").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy()
            try:
                vec = pool_and_normalize(hidden, mask, self.pooling, self.normalize)
            except ValueError as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("EMBEDDING", vec)]))
        return responses
