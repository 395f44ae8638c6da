"""Front door: TEXT -> the request core (embtrt_backend.core) -> EMBEDDING (or the vector type asked for).

TOKENS (INT64, one per text): the tokens embedded for it, prompt and every window included, so that
a caller (the gateway) can report usage without tokenizing again.

Only pb_utils glue: decoding, request parameters, the encoder call and the responses. What is done
to a request (prompt, tokenize, refuse, plan, pad, pool, finish) is the core's, tested without Triton.

The encoder runs here (encoder_mode local) or in each bucket's encoder model over BLS
(embtrt_backend.bucket_encoder).
"""

import json
import os
import sys

import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embtrt_backend.deps import use_bundle  # noqa: E402

use_bundle(os.path.dirname(os.path.abspath(__file__)))  # the repository's own packages, before importing them

from embtrt_backend import InputError  # noqa: E402
from embtrt_backend.batching import parameters  # noqa: E402
from embtrt_backend.drain import Drain  # noqa: E402
from embtrt_backend.long_rows import DEFAULT_TOKENS, LongLane, LongRowGate, LongRowsBusy  # noqa: E402
from embtrt_backend.bucket_encoder import BucketEncoder  # noqa: E402
from embtrt_backend.core import Request, RequestCore  # noqa: E402
from embtrt_backend.options import OUTPUTS, load_calibration, parse_request_parameters  # noqa: E402
from embtrt_backend.text import decode_texts  # noqa: E402


VECTOR_OUTPUTS = {name for name, _ in OUTPUTS.values()}


def _error(exc):
    """A request's error: INVALID_ARGUMENT for bad input or options (the caller's to fix), UNAVAILABLE
    when the long-text lane is full (retry), INTERNAL otherwise."""
    code = (pb_utils.TritonError.INVALID_ARG if isinstance(exc, InputError) else
            pb_utils.TritonError.UNAVAILABLE if isinstance(exc, LongRowsBusy) else pb_utils.TritonError.INTERNAL)
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), code))


def _send(request, response):
    request.get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def _instances(model_config: dict) -> int:
    return sum(int(g.get("count", 1)) for g in model_config.get("instance_group", [])) or 1


class TritonPythonModel:
    def initialize(self, args):
        self.drain = Drain(track=True)
        p = parameters(args["model_config"])
        here = os.path.dirname(os.path.abspath(__file__))
        self.core = RequestCore.from_folder(here, p, load_calibration(here))
        self.encode = BucketEncoder(here, p, self.core.cfg.buckets, pb_utils)
        # long texts run off this instance, on its lane (embtrt_backend.long_rows), where the model
        # takes texts that long and its encoder may run from two threads
        tokens = int(p.get("long_row_tokens", DEFAULT_TOKENS))
        self.lane = None
        if int(p["max_seq_length"]) > tokens and self.encode.thread_safe:
            gate = LongRowGate(args["model_name"], _instances(json.loads(args["model_config"])))
            self.lane = LongLane(gate, self._answer, _send, self.drain, tokens=tokens)

    def finalize(self):
        if self.lane is not None:
            self.lane.gate.remove()

    def execute(self, requests):
        # refused while draining (embtrt_backend.drain); long requests to the lane where there is one
        return self.drain.guard(pb_utils, requests, self._execute if self.lane is None else self._split)

    def _split(self, requests):
        """Long requests to the lane, the rest answered here; every answer through the request's
        response sender, so that execute() returns None and the instance is free at once."""
        long, short, arrays = [], [], []   # arrays: the short requests' TEXT, read once
        for r in requests:
            t = pb_utils.get_input_tensor_by_name(r, "TEXT")
            a = None if t is None else t.as_numpy()
            if a is not None and self.lane.is_long(a.ravel()):
                long.append(r)
            else:
                short.append(r)
                arrays.append(a)
        if not long:
            return self._execute(requests, arrays)
        for r in self.lane.submit(long):
            _send(r, _error(self.lane.busy()))
        for r, resp in zip(short, self._answer(short, arrays)):
            _send(r, resp)
        return None

    def _answer(self, requests, arrays=None):
        """_execute, with an unexpected failure made each request's INTERNAL error (a lane's requests
        must each get an answer)."""
        if not requests:
            return []
        try:
            return self._execute(requests, arrays)
        except Exception as exc:  # noqa: BLE001 (reported to each caller)
            return [_error(exc) for _ in requests]

    def _execute(self, requests, arrays=None):
        """The requests' responses; `arrays`: their TEXT tensors' arrays where _split read them already."""
        responses = [None] * len(requests)
        work, where = [], []
        for i, request in enumerate(requests):
            try:
                text = arrays[i] if arrays is not None else None
                if text is None:
                    text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                texts = decode_texts(text, self.core.cfg.max_text_bytes)
                if not texts:
                    raise InputError("TEXT holds no rows")
                opts = self.core.options.resolve(parse_request_parameters(request.parameters()))
                asked = request.requested_output_names()  # every output when the caller names none
                if asked and opts.output not in asked:
                    wrong = sorted(n for n in asked if n in VECTOR_OUTPUTS)
                    raise InputError(f"embedding_type {opts.embedding_type} comes back in {opts.output}, but the request "
                                     f"asked for {', '.join(wrong) or ', '.join(asked)}", "embedding_type")
            except InputError as exc:
                responses[i] = _error(exc)
                continue
            work.append(Request(texts, None, opts))
            where.append(i)
        for i, r, out in zip(where, work, self.core.run(work, self.encode) if work else ()):
            if out.error is not None:
                responses[i] = _error(out.error)
                continue
            tensors = [pb_utils.Tensor(r.options.output, out.vectors)]
            asked = requests[i].requested_output_names()
            if not asked or "TOKENS" in asked:  # a tensor less per response for callers that do not read it
                tensors.append(pb_utils.Tensor("TOKENS", out.tokens.reshape(-1, 1)))
            responses[i] = pb_utils.InferenceResponse(tensors)
        return responses
