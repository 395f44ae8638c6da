"""python-torch on CUDA without a GPU: the static-shape bookkeeping of its CUDA graphs (sizes,
padding, the copies, the eager fallback), the pooling it runs on the device, and the build's
refusal where there is no CUDA. `torch.cuda.CUDAGraph` itself runs only on the GPU host (the GPU
kit, benchmarks/gpukit); here the same StaticShape code runs with capture=False."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embtrt_backend.pooling import pool_and_normalize
from embtrt_backend.torch_encoder import torch_pool
from embtrt_backend.torch_graphs import (GraphSet, format_graph_shapes, graph_batch_sizes, pad_rows, padded_rows,
                                         parse_graph_shapes)

NAMES = ("input_ids", "attention_mask")


def test_batch_sizes_are_powers_of_two_up_to_the_buckets_max_and_the_max_itself():
    assert graph_batch_sizes(1) == (1,)
    assert graph_batch_sizes(32) == (1, 2, 4, 8, 16, 32)
    assert graph_batch_sizes(24) == (1, 2, 4, 8, 16, 24)
    with pytest.raises(ValueError, match="at least 1"):
        graph_batch_sizes(0)
    shapes = {32: (1, 2, 4), 512: (1, 2)}
    assert parse_graph_shapes(format_graph_shapes(shapes)) == shapes
    assert format_graph_shapes(shapes) == "32:1,2,4;512:1,2"
    with pytest.raises(ValueError, match="bucket 64 has no batch size"):
        parse_graph_shapes("64:")


def test_a_run_is_padded_up_to_the_nearest_captured_size_with_copies_of_its_first_row():
    assert [padded_rows(r, (1, 2, 4, 8, 12)) for r in (1, 2, 3, 5, 9, 12, 13)] == [1, 2, 4, 8, 12, 12, None]
    x = np.arange(6).reshape(2, 3)
    assert pad_rows(x, 2) is x
    assert pad_rows(x, 4).tolist() == [[0, 1, 2], [3, 4, 5], [0, 1, 2], [0, 1, 2]]


def _forward(calls: list):
    """A row-wise function of the token ids that tells rows and positions apart, and records the
    shapes it ran on: a stand-in for the encoder."""
    weights = torch.linspace(0.5, 2.0, 16)

    def forward(inputs):
        calls.append(tuple(inputs["input_ids"].shape))
        ids = inputs["input_ids"].to(torch.float32)
        mask = inputs["attention_mask"].to(torch.float32)
        return (ids * mask) @ weights[: ids.shape[1]].unsqueeze(1).repeat(1, 3) + mask.sum(dim=1, keepdim=True)
    return forward


def test_static_shapes_give_each_row_what_an_eager_run_gives_and_fall_back_where_no_shape_fits():
    calls: list = []
    forward = _forward(calls)
    graphs = GraphSet(torch, forward, {8: (1, 2, 4), 16: (1, 2)}, NAMES, "cpu", capture=False)
    assert sorted(graphs.graphs) == [(8, 1), (8, 2), (8, 4), (16, 1), (16, 2)]
    assert sorted(set(calls)) == [(1, 8), (1, 16), (2, 8), (2, 16), (4, 8)]   # each shape warmed at load
    rng = np.random.default_rng(0)
    for rows, length in [(1, 8), (3, 8), (4, 8), (2, 16), (1, 16)]:
        ids = rng.integers(1, 1000, (rows, length))
        mask = (np.arange(length)[None, :] < rng.integers(1, length + 1, (rows, 1))).astype(np.int64)
        feeds = {"input_ids": ids * mask, "attention_mask": mask}
        eager = forward({k: torch.from_numpy(v) for k, v in feeds.items()}).numpy()
        calls.clear()
        got = graphs.run(feeds)
        assert got is not None and got.shape == (rows, 3)
        np.testing.assert_allclose(got, eager, rtol=1e-6)
        assert calls == [(padded_rows(rows, graphs.shapes[length]), length)]   # ran on the padded static shape
    assert graphs.replays == 5
    assert graphs.run({"input_ids": np.ones((5, 8), np.int64), "attention_mask": np.ones((5, 8), np.int64)}) is None
    assert graphs.run({"input_ids": np.ones((1, 12), np.int64), "attention_mask": np.ones((1, 12), np.int64)}) is None
    # a run feeding more than the shapes' inputs (a page's pixel_values beside a query's) never replays a shape
    page = {"input_ids": np.ones((1, 8), np.int64), "attention_mask": np.ones((1, 8), np.int64),
            "pixel_values": np.zeros((1, 3, 4, 4), np.float32)}
    assert graphs.run(page) is None
    assert graphs.replays == 5 and graphs.eager == 3


def test_a_static_shapes_result_is_a_copy_that_the_next_run_does_not_overwrite():
    graphs = GraphSet(torch, _forward([]), {8: (2,)}, NAMES, "cpu", capture=False)
    one = {"input_ids": np.full((2, 8), 3), "attention_mask": np.ones((2, 8), np.int64)}
    first = graphs.run(one)
    second = graphs.run({"input_ids": np.full((2, 8), 7), "attention_mask": np.ones((2, 8), np.int64)})
    assert not np.allclose(first, second)
    np.testing.assert_allclose(graphs.run(one), first)


@pytest.mark.parametrize("mode", ["cls", "mean", "last-token"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_device_pooling_equals_the_numpy_pooling_the_cpu_targets_run(mode, side):
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((4, 7, 5)).astype(np.float32)
    lengths = np.array([7, 3, 1, 5])
    pos = np.arange(7)[None, :]
    mask = (pos < lengths[:, None]) if side == "right" else (pos >= 7 - lengths[:, None])
    mask = mask.astype(np.int64)
    for normalize in (True, False):
        want = pool_and_normalize(hidden, mask, mode, normalize)
        got = torch_pool(torch, torch.from_numpy(hidden).to(torch.float16).float(), torch.from_numpy(mask), mode,
                         normalize).numpy()
        np.testing.assert_allclose(got, pool_and_normalize(torch.from_numpy(hidden).to(torch.float16).float().numpy(),
                                                           mask, mode, normalize), rtol=1e-5, atol=1e-6)
        assert np.abs(got - want).max() < 5e-3 * max(1.0, np.abs(want).max())   # fp16 inputs, fp32 pooling


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA: the refusal is for hosts without it")
def test_a_cuda_build_and_a_cuda_encoder_say_at_once_that_this_machine_has_no_cuda(minilm_path, tmp_path):
    from embtrt.errors import DependencyError
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options
    from embtrt_backend.torch_encoder import TorchEncoder

    spec = spec_from_options(minilm_path, tmp_path / "repo", target="python-torch", device="cuda", precision="fp16")
    with pytest.raises(DependencyError, match="--device cuda: PyTorch sees no CUDA device on this machine") as ei:
        build(spec, log=lambda m: None)
    assert "build on the GPU host that will serve the repository" in ei.value.hint
    assert not (tmp_path / "repo").exists()
    with pytest.raises(RuntimeError, match="built for --device cuda, and PyTorch sees no CUDA device here"):
        TorchEncoder(str(minilm_path), "fp16", 1, "mean", True, True, device="cuda")
    with pytest.raises(ValueError, match="python-torch on cpu runs fp32 or bf16, not fp16"):
        TorchEncoder(str(minilm_path), "fp16", 1, "mean", True, True)
