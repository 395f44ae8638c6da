"""CUDA graphs for the kinds whose input takes images (#70 item 3), without a GPU: the same static-shape code the GPU
host captures (torch_graphs.StaticShape, capture=False here), fed by the front doors' own cores from a built
repository's parameters with `pad_to_bucket` on (as a python-torch build for --device cuda renders them):

- a page-image retriever's queries (ColPali: input_ids, attention_mask, token_type_ids; ColQwen2: input_ids,
  attention_mask) run on the static shapes, padded to the smallest bucket that holds them, and equal their eager vectors; its pages (their
  pixel_values beside the query inputs) never replay a query's shape: a ColPali page (one length, one pixel shape)
  replays its own set's, a ColQwen2 page (its size varies) runs eagerly, equal either way;
- a VLM embedder's runs of texts alone run on the static shapes (input_ids, attention_mask, mm_token_type_ids) and
  equal their eager vectors; a run with an image runs eagerly.
`torch.cuda.CUDAGraph` itself is captured only on the GPU host (owed to the next GPU run)."""

import numpy as np
import pytest

pytestmark = pytest.mark.integration
QUERIES = ["what is the revenue in the third quarter?", "a chart of sales by region", "Hello, world!"]


def _built(folder, out):
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options
    from embtrt.repository.config import parse_config

    repo = build(spec_from_options(folder, out), log=lambda _: None).repository
    name = next(p.name for p in repo.iterdir() if (p / "config.pbtxt").is_file())
    cfg = parse_config(repo / name / "config.pbtxt")
    return repo / name / "1", {k: v.string_value for k, v in cfg.parameters.items()}


def _encoders(here, p):
    """(the eager encoder, the static-shape one: batch sizes 1, 2 and 4 at every bucket, capture=False)."""
    from embtrt_backend.encoder import encoder_from_parameters

    eager = encoder_from_parameters(str(here), p)
    static = encoder_from_parameters(str(here), p)
    buckets = [int(b) for b in p["buckets"].split(",")]
    assert len(buckets) > 1 and buckets[-1] == int(p["max_seq_length"])   # the text kinds' default buckets
    static.capture({b: (1, 2, 4) for b in buckets}, tuple(p["input_names"].split(",")), capture=False)
    return eager, static


def _cuda_spec(folder):
    from embtrt.export.spec_options import spec_from_options

    return spec_from_options(folder, folder.parent / "unused").with_(device="cuda")


def _same(a, b, tol=1e-5):
    assert [x.shape for x in a] == [y.shape for y in b]
    assert max(float(np.abs(x - y).max()) for x, y in zip(a, b)) <= tol


@pytest.mark.parametrize("family", ["colpali", "colqwen2"])
def test_page_queries_run_on_static_shapes_and_pages_eagerly(tmp_path, family):
    from embtrt.reference.images import gate_images
    from embtrt_backend.kinds.pages.core import PagesCore, QueryRequest
    from tiny_pages import make_colpali, make_colqwen2

    folder = (make_colpali if family == "colpali" else make_colqwen2)(tmp_path / family)
    here, p = _built(folder, tmp_path / "repo")
    eager, static = _encoders(here, p)
    plain, padded = PagesCore.from_folder(str(here), p), PagesCore.from_folder(str(here), {**p, "pad_to_bucket": "true"})
    if family == "colpali":   # a ColPali page is one shape: graphs of its own (the params a cuda build renders)
        from embtrt.kinds.pages.export import PagesBuild
        from embtrt.kinds.pages.reference import info_of, load_reference

        cuda = PagesBuild.__new__(PagesBuild)   # its params as a --device cuda build renders them (no GPU here)
        cuda.spec, cuda._info = _cuda_spec(folder), info_of(load_reference(folder))
        q = cuda.image_graphs()
        assert q["image_graph_shapes"] == f"{len(plain.cfg.image_ids)}:1,2,4,8"
        from embtrt_backend.torch_encoder import capture_images

        capture_images(static, {**p, **q, "image_graph_shapes": f"{len(plain.cfg.image_ids)}:1,2,4"})   # capture=False: CPU
    run = lambda enc: lambda _bucket, feeds: enc.run(feeds)   # noqa: E731
    want = plain.run_queries([QueryRequest(plain.query_ids(QUERIES))], run(eager))[0].vectors
    got = padded.run_queries([QueryRequest(padded.query_ids(QUERIES))], run(static))[0].vectors
    _same(got, want)
    assert static.graphs.replays == 1 and static.graphs.eager == 0   # 3 queries: the smallest bucket's (length, 4) shape
    files = [f for f, _ in gate_images(3, seed=9)]
    pages_want = plain.run_images([plain.prepare_images(files)], run(eager))[0].vectors
    pages_got = padded.run_images([padded.prepare_images(files)], run(static))[0].vectors
    _same(pages_got, pages_want)
    assert static.graphs.replays == 1 and static.graphs.eager == 1   # the query shapes never took the pages
    if family == "colpali":
        assert [g.replays for g in static.more_graphs] == [1]   # 3 pages: the page set's (length, 4) shape
    else:
        assert static.more_graphs == []   # ColQwen2's pages vary in size: eager


def test_vlm_texts_run_on_static_shapes_and_images_eagerly(tmp_path):
    from embtrt.reference.images import gate_images
    from embtrt_backend.kinds.vlm.core import VlmCore
    from tiny_vlm import make_vlm

    here, p = _built(make_vlm(tmp_path / "vlm"), tmp_path / "repo")
    assert p["input_names"] == "input_ids,attention_mask,mm_token_type_ids"
    eager, static = _encoders(here, p)
    plain, padded = VlmCore.from_folder(str(here), p), VlmCore.from_folder(str(here), {**p, "pad_to_bucket": "true"})
    run = lambda enc: lambda _bucket, feeds: enc.run(feeds)   # noqa: E731
    want = plain.run([plain.prepare(QUERIES, None, {})], run(eager))[0].vectors
    got = padded.run([padded.prepare(QUERIES, None, {})], run(static))[0].vectors
    _same(list(got), list(want))
    assert static.graphs.replays == 1 and static.graphs.eager == 0
    files = [f for f, _ in gate_images(2, seed=9)]
    fused_want = plain.run([plain.prepare(QUERIES[:2], files, {})], run(eager))[0].vectors
    fused_got = padded.run([padded.prepare(QUERIES[:2], files, {})], run(static))[0].vectors
    _same(list(fused_got), list(fused_want))
    assert static.graphs.replays == 1 and static.graphs.eager == 1   # the fused run went eagerly
