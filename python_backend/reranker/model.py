"""Reranker front door: (QUERY, DOCUMENT) pairs -> the pair core (embtrt_backend.pairs) -> SCORES.

One row per pair. SCORES (FP32 [rows, labels]): the model's activation as CrossEncoder.predict
applies it, or raw logits / softmax as the request's `activation` parameter asks. TOKENS (INT64
[rows, 1]): the tokens scored for each pair, for usage. The encoder runs in this model or, over
BLS, in each bucket's encoder model (embtrt_backend.bucket_encoder). Only pb_utils glue is here;
the rest is the pair core's, tested without Triton.
"""

import os
import sys

import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embtrt_backend.deps import use_bundle  # noqa: E402

use_bundle(os.path.dirname(os.path.abspath(__file__)))  # the repository's own packages, before importing them

from embtrt_backend import InputError  # noqa: E402
from embtrt_backend.batching import parameters  # noqa: E402
from embtrt_backend.drain import Drain  # noqa: E402
from embtrt_backend.bucket_encoder import BucketEncoder  # noqa: E402
from embtrt_backend.options import parse_request_parameters  # noqa: E402
from embtrt_backend.pairs import PairCore, PairRequest  # noqa: E402
from embtrt_backend.text import decode_texts  # noqa: E402


def _error(exc):
    code = pb_utils.TritonError.INVALID_ARG if isinstance(exc, InputError) else pb_utils.TritonError.INTERNAL
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), code))


class TritonPythonModel:
    def initialize(self, args):
        self.drain = Drain(track=True)
        p = parameters(args["model_config"])
        here = os.path.dirname(os.path.abspath(__file__))
        self.core = PairCore.from_folder(here, p)
        self.encode = BucketEncoder(here, p, self.core.cfg.buckets, pb_utils)

    def execute(self, requests):
        return self.drain.guard(pb_utils, requests, self._execute)   # refused while draining (embtrt_backend.drain)

    def _execute(self, requests):
        responses = [None] * len(requests)
        work, where = [], []
        limit = self.core.cfg.max_text_bytes
        for i, request in enumerate(requests):
            try:
                q = pb_utils.get_input_tensor_by_name(request, "QUERY")
                d = pb_utils.get_input_tensor_by_name(request, "DOCUMENT")
                if q is None or d is None:
                    raise InputError("a reranker request needs QUERY and DOCUMENT (one row per pair)", "QUERY")
                queries = decode_texts(q.as_numpy(), limit)
                documents = decode_texts(d.as_numpy(), limit)
                opts = self.core.options(parse_request_parameters(request.parameters()))
            except InputError as exc:
                responses[i] = _error(exc)
                continue
            work.append(PairRequest(queries, documents, opts))
            where.append(i)
        for i, out in zip(where, self.core.run(work, self.encode) if work else ()):
            if out.error is not None:
                responses[i] = _error(out.error)
                continue
            tensors = [pb_utils.Tensor("SCORES", out.scores)]
            asked = requests[i].requested_output_names()
            if not asked or "TOKENS" in asked:
                tensors.append(pb_utils.Tensor("TOKENS", out.tokens.reshape(-1, 1)))
            responses[i] = pb_utils.InferenceResponse(tensors)
        return responses
