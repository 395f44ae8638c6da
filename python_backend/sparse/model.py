"""Sparse front door: TEXT -> the request core (embtrt_backend.core; SPLADE pooled in the graph)
-> each row's active dimensions: SPARSE_INDICES (INT64) and SPARSE_VALUES (FP32), [rows, width]
padded with index -1 / value 0 to the request's longest row; TOKENS per text.

Options (embtrt_backend.sparse.resolve): prompt_name, input_type, truncate, max_active_dims (at most
the graph's K where it was built with --active-dims-in-graph: embtrt_backend.sparse.within_graph).
The encoder runs in this model or, over BLS, in each bucket's encoder model; an inference-free
SPLADE's queries (input_type query) take its static query side (embtrt_backend.sparse.StaticQuery)
and no encoder run. Only pb_utils glue here.
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
from embtrt_backend.core import Request, RequestCore  # noqa: E402
from embtrt_backend.options import parse_request_parameters  # noqa: E402
from embtrt_backend.sparse import resolve, sparsify, within_graph  # noqa: E402
from embtrt_backend.text import decode_texts  # noqa: E402


def _error(exc):
    code = pb_utils.TritonError.INVALID_ARG if isinstance(exc, InputError) else pb_utils.TritonError.INTERNAL
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), code))


class TritonPythonModel:
    def initialize(self, args):
        self.drain = Drain(track=True)
        p = parameters(args["model_config"])
        here = os.path.dirname(os.path.abspath(__file__))
        self.core = RequestCore.from_folder(here, p)
        self.encode = BucketEncoder(here, p, self.core.cfg.buckets, pb_utils)
        self.default_k = int(p.get("max_active_dims") or 0) or None   # the folder's max_active_dims
        self.graph_k = int(p.get("graph_max_active_dims") or 0) or None   # what the graph keeps, if it keeps a top-K
        self.static = None   # inference-free SPLADE: queries are weighted tokens, no encoder run
        if p.get("query_route") == "static":
            import numpy as np

            from embtrt_backend.sparse import StaticQuery

            self.static = StaticQuery(os.path.join(here, "query_tokenizer.json"),
                                      np.load(os.path.join(here, "embtrt_query_weights.npy")), int(p["query_max_length"]))

    def execute(self, requests):
        return self.drain.guard(pb_utils, requests, self._execute)   # refused while draining (embtrt_backend.drain)

    def _execute(self, requests):
        responses = [None] * len(requests)
        work, where, active = [], [], []
        for i, request in enumerate(requests):
            try:
                texts = decode_texts(pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy(),
                                     self.core.cfg.max_text_bytes)
                if not texts:
                    raise InputError("TEXT holds no rows")
                opts, k, query = resolve(self.core.options, parse_request_parameters(request.parameters()),
                                          self.default_k)
                if query and self.static is not None:
                    weights, tokens = self.static.encode(texts, opts.prompt)
                    responses[i] = self._response(request, weights, tokens, k)
                    continue
                within_graph(k, self.graph_k)
            except InputError as exc:
                responses[i] = _error(exc)
                continue
            work.append(Request(texts, None, opts))
            where.append(i)
            active.append(k)
        outs = self.core.run(work, self.encode) if work else ()
        for i, k, out in zip(where, active, outs):
            if out.error is not None:
                responses[i] = _error(out.error)
                continue
            responses[i] = self._response(requests[i], out.vectors, out.tokens, k)
        return responses

    def _response(self, request, weights, tokens, k):
        idx, val = sparsify(weights, k)
        tensors = [pb_utils.Tensor("SPARSE_INDICES", idx), pb_utils.Tensor("SPARSE_VALUES", val)]
        asked = request.requested_output_names()
        if not asked or "TOKENS" in asked:
            tensors.append(pb_utils.Tensor("TOKENS", tokens.reshape(-1, 1)))
        return pb_utils.InferenceResponse(tensors)
