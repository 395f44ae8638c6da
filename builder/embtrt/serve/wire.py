"""The Triton wire on the client side, one place for every caller (the client, the gateway's
upstream, probe, bench, matrix, verify): TEXT and token-id tensors, the output tensor of each
vector type, and the classification of Triton / gRPC errors into what a caller can act on.

Works with both tritonclient.grpc (sync) and tritonclient.grpc.aio: their InferInput and
InferRequestedOutput are the same classes.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from typing import Callable, TypeVar

import numpy as np
from embtrt_backend.options import OUTPUTS as TYPED_OUTPUTS

from ..errors import ClientError

T = TypeVar("T")

# request option embedding_type -> the front door's output tensor: the front door's own table
OUTPUTS = {etype: name for etype, (name, _dtype) in TYPED_OUTPUTS.items()}

# what a failed call was, for the caller to act on
BAD = "bad"                  # the request is at fault (INVALID_ARGUMENT): never retried, the caller's 400
QUEUE_FULL = "queue_full"    # the server is up but its queue is full: retry elsewhere or later (429)
UNAVAILABLE = "unavailable"  # the server (or this model on it) cannot answer now: retry elsewhere (503)
TIMEOUT = "timeout"          # no answer within the deadline
OOM = "oom"                  # the server ran out of memory for this call
OTHER = "other"              # anything else (an INTERNAL error of the model): the caller decides
KINDS = (BAD, QUEUE_FULL, UNAVAILABLE, TIMEOUT, OOM, OTHER)

RETRYABLE = (QUEUE_FULL, UNAVAILABLE)
MAX_BACKOFF_S = 2.0

_UNAVAILABLE_HINTS = ("failed to connect", "stub process", "is not healthy", "socket closed", "connection reset",
                      "connection refused", "unavailable", "unknown model", "is not ready")


def _grpc():
    import tritonclient.grpc as grpcclient

    return grpcclient


def text_input(texts: list[str] | list[bytes], name: str = "TEXT"):
    """A [n, 1] BYTES tensor of UTF-8 texts (the front door's and the bucket ensembles' input)."""
    arr = np.array([[t.encode("utf-8") if isinstance(t, str) else bytes(t)] for t in texts], dtype=object)
    inp = _grpc().InferInput(name, [len(texts), 1], "BYTES")
    inp.set_data_from_numpy(arr)
    return inp


def int64_inputs(feeds: dict[str, np.ndarray], names: tuple[str, ...] | list[str]):
    """INT64 encoder inputs (input_ids, attention_mask, token_type_ids) in the given order."""
    out = []
    for n in names:
        t = _grpc().InferInput(n, list(feeds[n].shape), "INT64")
        t.set_data_from_numpy(feeds[n])
        out.append(t)
    return out


def outputs(*names: str) -> list:
    return [_grpc().InferRequestedOutput(n) for n in names]


def output_name(params: dict | None) -> str:
    """The front door's output tensor for these request parameters (embedding_type)."""
    return OUTPUTS.get(str((params or {}).get("embedding_type", "float")).lower(), "EMBEDDING")


def _status(exc: BaseException | str) -> str:
    """The gRPC status name of a failure: tritonclient's status() ("StatusCode.UNAVAILABLE"), or the one its
    message starts with ("[StatusCode.UNAVAILABLE] ..."), so that an exception and its str() classify alike."""
    status = "" if isinstance(exc, str) else getattr(exc, "status", "")
    status = str((status() if callable(status) else status) or "")  # aiohttp's status is an int attribute
    if not status:
        m = re.match(r"\s*\[(StatusCode\.[A-Z_]+)\]", str(exc))
        status = m.group(1) if m else ""
    return status.upper()


def classify(exc: BaseException | str) -> str:
    """One of KINDS for a tritonclient InferenceServerException, a transport error or its message."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):  # a caller's own deadline (asyncio.timeout)
        return TIMEOUT
    status = _status(exc)
    msg = str(exc).lower()
    if "queue size" in msg or "RESOURCE_EXHAUSTED" in status or "statuscode.resource_exhausted" in msg:
        return QUEUE_FULL
    if "out of memory" in msg or "bad_alloc" in msg or "cannot allocate" in msg or re.search(r"\boom\b", msg):
        return OOM
    if "DEADLINE_EXCEEDED" in status or "deadline exceeded" in msg or "timed out" in msg:
        return TIMEOUT
    if "INVALID_ARGUMENT" in status or "statuscode.invalid_argument" in msg:  # the latter: grpc's AioRpcError
        return BAD
    if "UNAVAILABLE" in status or "NOT_FOUND" in status or any(h in msg for h in _UNAVAILABLE_HINTS):
        return UNAVAILABLE
    return OTHER


def retryable(exc: BaseException | str) -> bool:
    return classify(exc) in RETRYABLE


def backoff(delay: float) -> float:
    """Exponential backoff with jitter, so that rejected callers do not retry in lockstep."""
    return min(MAX_BACKOFF_S, delay) * (0.5 + random.random())


def with_retries(call: Callable[[], T], retries: int, backoff_s: float, fail: Callable[[Exception], Exception],
                 on_retry: Callable[[], None] | None = None) -> T:
    """call(), retried up to `retries` times with exponential backoff where the failure is safe to
    retry (the server unavailable, its queue full); any other failure, or the last, is raised as
    fail(exc) (the blocking clients' one retry loop; the asyncio ones await the same backoff).
    on_retry() runs before each retry (a client of several replicas moves to the next one)."""
    delay = backoff_s
    for attempt in range(retries + 1):
        try:
            return call()
        except Exception as exc:  # InferenceServerException; decide retry or fail
            if attempt < retries and retryable(exc):
                if on_retry is not None:
                    on_retry()
                time.sleep(backoff(delay))
                delay *= 2
                continue
            raise fail(exc) from exc
    raise AssertionError("unreachable")


def pair_params(activation: str, truncate: bool, truncation_direction: str, prompt_name: str | None = None,
                *, allowed: tuple[str, ...], instruction: str | None = None) -> dict:
    """A pair-core front door's request parameters (embtrt_backend.pairs.PairOptions), the
    defaults left out; an activation not in `allowed` refused here; `instruction`: an LLM-style reranker's."""
    if activation not in allowed:
        raise ClientError(f"activation {activation!r}: must be one of {', '.join(allowed)}")
    params: dict = {}
    if activation != "default":
        params["activation"] = activation
    if not truncate:
        params["truncate"] = False
    if truncation_direction != "right":
        params["truncation_direction"] = truncation_direction
    if prompt_name is not None:
        params["prompt_name"] = prompt_name
    if instruction is not None:
        params["instruction"] = instruction
    return params
