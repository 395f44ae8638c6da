"""On a GPU host: build strongly typed TensorRT engines per bucket from fp32 and fp16 ONNX, check
each plan against the graph the build's gate ran, serve them.

The plans are built, run (Polygraphy's runner) and compared without PyTorch on the GPU; the
ONNX export before them runs PyTorch on the CPU. Skipped with the concrete reason where
TensorRT or a GPU (NVML) is missing. Serving needs a
tritonserver with the TensorRT backend (an NGC container); point EMBTRT_TRITONSERVER and
EMBTRT_BACKEND_DIR at it, or that part is skipped with its reason.
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from embtrt.export.onnx2trt import tensorrt_available

pytestmark = pytest.mark.gpu
OK, WHY = tensorrt_available()
needs_trt = pytest.mark.skipif(not OK, reason=WHY)


@needs_trt
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_engines_build_and_match_onnx(tiny_models, tmp_path, precision):
    from embtrt.export import build
    from embtrt.export.onnx2trt import check_plans
    from embtrt.export.spec_options import spec_from_options

    out = tmp_path / "repo"
    res = build(spec_from_options(tiny_models["qwen3-last"], out, name="q", target="tensorrt", precision=precision),
                log=print)
    assert res.pending == [] and res.manifest["tensorrt"]["built"] is True
    assert all(st.state == "ok" for st in check_plans(out))
    assert "torch" not in sys.modules or not sys.modules["torch"].cuda.is_initialized()


@needs_trt
def test_minilm_engines_serve_equal_to_sentence_transformers(tmp_path, corpus, minilm_path):
    binary = os.environ.get("EMBTRT_TRITONSERVER")
    if not binary:
        pytest.skip("EMBTRT_TRITONSERVER is not set: no tritonserver with the TensorRT backend to serve plans")
    from conftest import start_server

    from embtrt.export import build
    from embtrt.serve.client import EmbeddingClient
    from embtrt.reference.parity import cosine_rows
    from embtrt.reference.torch_ref import st_embed
    from embtrt.serve.server import ServerSpec, TritonServer
    from embtrt.export.spec_options import spec_from_options

    out = tmp_path / "repo"
    build(spec_from_options(None, out, target="tensorrt", precision="fp16", fp32_layers=True), log=print)
    srv = start_server(out, tmp_path)
    spec = ServerSpec(**{**srv.spec.__dict__, "tritonserver": Path(binary),
                         "backend_directory": Path(os.environ.get("EMBTRT_BACKEND_DIR", "/opt/tritonserver/backends"))})
    with TritonServer(spec) as s, EmbeddingClient(s.grpc_url, "all_minilm_l6_v2") as c:
        got = c.embed(corpus)
    cos = cosine_rows(st_embed(minilm_path, corpus), got)
    assert np.percentile(cos, 50) >= 0.9999 and np.percentile(cos, 1) >= 0.999
