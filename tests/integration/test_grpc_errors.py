"""Errors over gRPC that a client can act on (#29 item 6): bad input and bad options are that
request's INVALID_ARGUMENT with a message naming the fault; unknown parameters are refused; the
bucket ensembles refuse options, pointing to the front door. A real tritonserver on 127.0.0.1."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.integration
MODEL = "all_minilm_l6_v2"


def _infer(url: str, model: str, texts, parameters=None):
    c = grpcclient.InferenceServerClient(url)
    arr = np.array([[t if isinstance(t, bytes) else t.encode()] for t in texts], dtype=object)
    inp = grpcclient.InferInput("TEXT", list(arr.shape), "BYTES")
    inp.set_data_from_numpy(arr)
    try:
        return c.infer(model, [inp], parameters=parameters).as_numpy("EMBEDDING")
    finally:
        c.close()


@pytest.mark.parametrize("params,texts,needle", [
    ({"dimensions": "abc"}, ["x"], "invalid dimensions: must be an integer, got str 'abc'"),
    ({"dimensions": "128"}, ["x"], "invalid dimensions: must be an integer, got str '128'"),
    ({"dimensions": -5}, ["x"], "invalid dimensions -5: this model allows any width from 1 to 384"),
    ({"embedding_type": 5}, ["x"], "invalid embedding_type: must be a string, got int 5"),
    ({"dimension": 128}, ["x"], "unknown request parameter 'dimension': the options are prompt_name"),
    (None, [b"\xff\xfe"], "row 0: TEXT is not valid UTF-8"),
    ({"truncate": "NONE"}, ["word " * 400], "row 0: text is longer than the max sequence length 256 tokens"),
])
def test_bad_input_and_options_are_invalid_argument_naming_the_fault(minilm_server, params, texts, needle):
    with pytest.raises(InferenceServerException) as err:
        _infer(minilm_server.grpc_url, MODEL, texts, params)
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT", (err.value.status(), str(err.value))
    assert needle in str(err.value), str(err.value)


def test_the_bucket_ensembles_refuse_options_pointing_to_the_front_door(minilm_server):
    with pytest.raises(InferenceServerException) as err:
        _infer(minilm_server.grpc_url, f"{MODEL}_32", ["x"], {"dimensions": 128})
    assert "take no request options (dimensions)" in str(err.value) and f"send options to {MODEL}" in str(err.value)
    v = _infer(minilm_server.grpc_url, f"{MODEL}_32", ["the same ensemble without options"])
    assert v.shape == (1, 384) and np.isfinite(v).all()


def test_asking_for_the_float_output_of_an_int8_request_is_refused_by_name(minilm_server):
    c = grpcclient.InferenceServerClient(minilm_server.grpc_url)
    inp = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[b"x"]], dtype=object))
    try:
        with pytest.raises(InferenceServerException) as err:
            c.infer(MODEL, [inp], parameters={"embedding_type": "int8"},
                    outputs=[grpcclient.InferRequestedOutput("EMBEDDING")])
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "embedding_type int8 comes back in EMBEDDING_INT8, but the request asked for EMBEDDING" in str(err.value)
        r = c.infer(MODEL, [inp], parameters={"embedding_type": "int8"},
                    outputs=[grpcclient.InferRequestedOutput("EMBEDDING_INT8"), grpcclient.InferRequestedOutput("TOKENS")])
        assert r.as_numpy("EMBEDDING_INT8").dtype == np.int8 and r.as_numpy("TOKENS").tolist() == [[3]]
    finally:
        c.close()


def test_embed_cli_answers_a_bad_option_as_bad_input_exit_2(minilm_server):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "embtrt.cli", "embed", "hello", "--url", minilm_server.grpc_url,
                        "--dimensions", "999"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    out = r.stdout + r.stderr
    assert "invalid dimensions 999: this model allows any width from 1 to 384" in out and "INTERNAL" not in out
