"""The front door of every kind of model (embtrt_backend.kinds): an embedder's TEXT -> EMBEDDING (or
the vector type asked for), a reranker's (QUERY, DOCUMENT) pairs -> SCORES, a sparse encoder's TEXT
-> SPARSE_INDICES / SPARSE_VALUES; TOKENS (INT64, one per row) with each: the tokens it took, prompt
and every window included, so that a caller (the gateway) can report usage without tokenizing again.

Only pb_utils glue: the inputs, request parameters, the encoder call, the long-text lane and the
responses. What is done to a request is its kind's Door (embtrt_backend.doors) over the request
core or the pair core, tested without Triton.

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
from embtrt_backend.doors import door_for  # noqa: E402
from embtrt_backend.drain import Drain  # noqa: E402
from embtrt_backend.host import instances_of, size_threads  # noqa: E402
from embtrt_backend.kinds import kind_of  # noqa: E402
from embtrt_backend.long_rows import DEFAULT_TOKENS, LongLane, LongRowGate, LongRowsBusy  # noqa: E402
from embtrt_backend.bucket_encoder import BucketEncoder  # noqa: E402
from embtrt_backend.options import parse_request_parameters  # noqa: E402
from embtrt_backend.stages import NULL, StageClock, TritonMetrics  # noqa: E402
from embtrt_backend.tracing import tracer_for  # noqa: E402


def _error(exc):
    """A request's error: INVALID_ARGUMENT for bad input or options (the caller's to fix), UNAVAILABLE
    when the long-text lane is full (retry), INTERNAL otherwise."""
    code = (pb_utils.TritonError.INVALID_ARG if isinstance(exc, InputError) else
            pb_utils.TritonError.UNAVAILABLE if isinstance(exc, LongRowsBusy) else pb_utils.TritonError.INTERNAL)
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), code))


def _send(request, response):
    request.get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def _response(request, outputs, asked=None):
    """The response of named output arrays; TOKENS only where the caller reads it (asks for no output
    by name, or for TOKENS): a tensor less per response for callers that do not. `asked`: the request's
    requested output names where the caller has read them already."""
    if asked is None:
        asked = request.requested_output_names()
    return pb_utils.InferenceResponse([pb_utils.Tensor(name, a) for name, a in outputs
                                       if name != "TOKENS" or not asked or "TOKENS" in asked])


class TritonPythonModel:
    def initialize(self, args):
        self.drain = Drain(track=True)
        # the tokenizer's threads: the host's cores shared by this model's instances (embtrt_backend.host)
        p = size_threads(parameters(args["model_config"]), instances_of(json.loads(args["model_config"])))
        here = os.path.dirname(os.path.abspath(__file__))
        self.door = door_for(kind_of(p.get("kind")), here, p)
        self.encode = BucketEncoder(here, p, self.door.buckets, pb_utils)
        # the front door's own stage timers (embtrt_backend.stages), behind the stage_timers flag
        # and its stages as spans under Triton's trace of each request, where an OTLP endpoint is set
        # (embtrt_backend.tracing; the timers record their marks for it)
        self.clock = NULL
        self.tracer = tracer_for(args["model_name"])
        timers = p.get("stage_timers", "false") == "true"
        if timers or self.tracer is not None:
            self.clock = StageClock(TritonMetrics(pb_utils, args["model_name"]) if timers else None,
                                    record=self.tracer is not None)
            if hasattr(self.door, "core"):
                self.door.core.clock = self.clock
        # long texts run off this instance, on its lane (embtrt_backend.long_rows), where the model
        # takes texts that long and its encoder may run from two threads
        tokens = int(p.get("long_row_tokens", DEFAULT_TOKENS))
        self.lane = None
        if int(p["max_seq_length"]) > tokens and self.encode.thread_safe:
            gate = LongRowGate(args["model_name"], instances_of(json.loads(args["model_config"])))
            self.lane = LongLane(gate, self._answer, _send, self.drain, tokens=tokens)

    def finalize(self):
        if self.lane is not None:
            self.lane.gate.remove()
        self.clock.close()
        if self.tracer is not None:
            self.tracer.close()

    def execute(self, requests):
        # refused while draining (embtrt_backend.drain); long requests to the lane where there is one
        return self.drain.guard(pb_utils, requests, self._execute if self.lane is None else self._split)

    def _split(self, requests):
        """Long requests to the lane, the rest answered here; every answer through the request's
        response sender, so that execute() returns None and the instance is free at once."""
        long, short, arrays = [], [], []   # arrays: the short requests' inputs, read once
        tokens = self.lane.tokens
        for r in requests:
            a = self._inputs(r)
            rows = self.door.row_bytes(a)
            if sum(rows) > tokens and not any(n > tokens for n in rows):   # rows that one pass may join (late chunking)
                try:
                    rows = self.door.pass_bytes(rows, parse_request_parameters(r.parameters()))
                except InputError:
                    pass   # bad parameters: refused when the request is parsed
            if any(n > tokens for n in rows):
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

    def _inputs(self, request):
        """The request's inputs' arrays by name (None where absent)."""
        out = {}
        for name in self.door.inputs:
            t = pb_utils.get_input_tensor_by_name(request, name)
            out[name] = None if t is None else t.as_numpy()
        return out

    def _execute(self, requests, arrays=None):
        """The requests' responses; `arrays`: their inputs where _split read them already."""
        clock = self.clock
        clock.start()
        traced = self.tracer.contexts(requests) if self.tracer is not None else None
        responses = [None] * len(requests)
        work, where = [], []
        if arrays is None:
            arrays = []
            for r in requests:
                try:
                    arrays.append(self._inputs(r))
                except Exception as exc:  # noqa: BLE001 (that request's error, below)
                    arrays.append(exc)
        clock.mark("read")
        asked: list = [None] * len(requests)
        for i, request in enumerate(requests):
            try:
                if isinstance(arrays[i], Exception):
                    raise arrays[i]
                asked[i] = request.requested_output_names()
                item = self.door.parse(arrays[i], parse_request_parameters(request.parameters()), asked[i])
            except Exception as exc:  # noqa: BLE001 (InputError: INVALID_ARG; else INTERNAL: this request's, never the batch's)
                responses[i] = _error(exc)
                continue
            if item.ready is not None:   # made without the encoder
                responses[i] = _response(request, item.ready, asked[i])
                continue
            work.append(item)
            where.append(i)
        clock.mark("parse")
        outs = self.door.run(work, self.encode) if work else ()
        clock.mark("encode")   # what a door's core did not mark itself (an image tower's run)
        for i, item, out in zip(where, work, outs, strict=True):
            responses[i] = _error(out.error) if out.error is not None else \
                _response(requests[i], self.door.outputs(item, out), asked[i])
        clock.mark("respond")
        clock.flush(len(requests))
        if traced is not None:
            start, segments, rows = clock.recorded()
            self.tracer.emit(traced, segments, start, len(requests), rows)
        return responses
