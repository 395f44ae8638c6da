"""serve/wire.py: the Triton tensors and the classification of failures, without a server."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from embtrt.serve import wire


@pytest.mark.parametrize(("status", "message", "kind"), [
    ("StatusCode.RESOURCE_EXHAUSTED", "Exceeds maximum queue size", wire.QUEUE_FULL),
    ("StatusCode.UNAVAILABLE", "Exceeds maximum queue size", wire.QUEUE_FULL),
    ("StatusCode.INTERNAL", "onnxruntime: Failed to allocate memory: out of memory", wire.OOM),
    ("StatusCode.INTERNAL", "std::bad_alloc", wire.OOM),
    ("StatusCode.INTERNAL", "CUDA OOM while running the encoder", wire.OOM),
    ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded", wire.TIMEOUT),
    ("StatusCode.INVALID_ARGUMENT", "unexpected shape for input 'TEXT'", wire.BAD),
    ("StatusCode.UNAVAILABLE", "failed to connect to all addresses", wire.UNAVAILABLE),
    ("StatusCode.UNAVAILABLE", "Request timeout expired", wire.UNAVAILABLE),  # Triton's queue policy: retry elsewhere
    ("StatusCode.NOT_FOUND", "Request for unknown model: 'x' is not found", wire.UNAVAILABLE),
    ("StatusCode.INTERNAL", "Failed to process the request(s) for model 'x', message: Stub process is not healthy.",
     wire.UNAVAILABLE),
    ("StatusCode.INTERNAL", "division by zero in the pooling", wire.OTHER),
])
def test_classify_gives_the_same_kind_for_an_exception_and_its_message(status, message, kind):
    exc = InferenceServerException(message, status)
    assert wire.classify(exc) == kind
    assert wire.classify(str(exc)) == kind  # "[StatusCode.X] message": what the measurement records keep
    assert wire.retryable(exc) == (kind in (wire.QUEUE_FULL, wire.UNAVAILABLE))


def test_classify_reads_plain_messages_and_transport_errors():
    assert wire.classify("Deadline Exceeded") == wire.TIMEOUT
    assert wire.classify("connection refused") == wire.UNAVAILABLE
    assert wire.classify("something else") == wire.OTHER
    assert wire.classify("the room was booked") == wire.OTHER  # 'oom' only as a word
    assert wire.classify(asyncio.TimeoutError()) == wire.TIMEOUT  # a caller's own deadline: no message at all
    assert wire.classify(ConnectionResetError("Connection reset by peer")) == wire.UNAVAILABLE

    class HttpError(Exception):  # aiohttp's ClientResponseError: status is an int attribute, not a method
        status = 503

    assert wire.classify(HttpError("Service Unavailable")) == wire.UNAVAILABLE
    assert set(wire.KINDS) == {wire.BAD, wire.QUEUE_FULL, wire.UNAVAILABLE, wire.TIMEOUT, wire.OOM, wire.OTHER}


def test_text_input_is_a_bytes_column_of_utf8_texts():
    inp = wire.text_input(["héllo", b"raw"])
    assert (inp.name(), inp.datatype(), inp.shape()) == ("TEXT", "BYTES", [2, 1])
    assert wire.text_input(["x"], name="QUERY").name() == "QUERY"


def test_int64_inputs_keep_the_given_order_and_shapes():
    feeds = {"input_ids": np.ones((2, 5), np.int64), "attention_mask": np.ones((2, 5), np.int64)}
    got = wire.int64_inputs(feeds, ("attention_mask", "input_ids"))
    assert [(t.name(), t.datatype(), t.shape()) for t in got] == [("attention_mask", "INT64", [2, 5]),
                                                                  ("input_ids", "INT64", [2, 5])]


def test_output_name_follows_embedding_type():
    assert wire.output_name(None) == "EMBEDDING"
    assert wire.output_name({"embedding_type": "BINARY"}) == "EMBEDDING_INT8"
    assert wire.output_name({"embedding_type": "ubinary"}) == "EMBEDDING_UINT8"
    assert wire.output_name({"embedding_type": "unknown"}) == "EMBEDDING"
    assert [o.name() for o in wire.outputs("EMBEDDING", "TOKENS")] == ["EMBEDDING", "TOKENS"]


def test_backoff_is_jittered_and_capped():
    for _ in range(100):
        assert 0.05 <= wire.backoff(0.1) <= 0.15
        assert wire.backoff(100.0) <= 1.5 * wire.MAX_BACKOFF_S


@pytest.mark.parametrize(("status", "message", "label"), [
    ("StatusCode.UNAVAILABLE", "the server is draining (shutting down): retry the request on another replica", "draining"),
    ("StatusCode.UNAVAILABLE", "failed to connect to all addresses", wire.UNAVAILABLE),
    ("StatusCode.INTERNAL", "Stub process is not healthy.", wire.UNAVAILABLE),
    ("StatusCode.UNAVAILABLE", "Exceeds maximum queue size", wire.QUEUE_FULL),
    ("StatusCode.INVALID_ARGUMENT", "the server is draining, says the text itself", wire.BAD),
])
def test_the_gateway_counts_a_draining_replicas_refusal_apart_from_other_unavailable_ones(status, message, label):
    """embtrt_gateway_upstream_retries{reason}: the front door's drain refusal (python_backend's drain.MESSAGE)
    is "draining" (#72: the drains a dashboard shows), every other unavailable kind stays "unavailable"."""
    from embtrt.scale.gateway.upstream import reason
    from embtrt_backend.drain import MESSAGE

    if label == "draining":
        assert message == MESSAGE
    assert reason(InferenceServerException(message, status)) == label
