"""A build with --overflow reject: the over-long request fails clearly, the others are served."""

import numpy as np
import pytest

from conftest import start_server
from embtrt.export import build
from embtrt.serve.client import EmbeddingClient
from embtrt.errors import ClientError
from embtrt.export.spec import spec_from_options

pytestmark = pytest.mark.integration


def test_reject_mode_fails_only_the_over_long_request(tiny_models, tmp_path):
    repo = tmp_path / "repo"
    build(spec_from_options(tiny_models["bert-cls"], repo, name="bert", overflow="reject"), log=lambda m: None)
    with start_server(repo, tmp_path) as srv, EmbeddingClient(srv.grpc_url, "bert") as c:
        with pytest.raises(ClientError, match="longer than the max sequence length 64 tokens"):
            c.embed(["fine", "word " * 100])
        v = c.embed(["fine", "also fine"])
        assert v.shape == (2, 32) and np.all(np.isfinite(v))
