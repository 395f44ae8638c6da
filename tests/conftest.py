"""Shared fixtures: tiny models and built repositories (session-scoped), real tritonservers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "python_backend", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def _quiet(_msg: str) -> None:
    pass


def pytest_configure(config):
    """Files' durations recorded where asked for (tests/balance.py). Every run starts with an empty
    reference cache of its own (embtrt/reference/cache.py): a PyTorch reference is computed once per run
    and reused by the later builds, verify runs and parity checks of the same model, texts and options
    (subprocesses inherit the variable); the user's ~/.cache/embtrt/references is never read or written,
    so a run is as cold as a fresh machine. Under EMBTRT_TEST_RUN_DIR (make test-all) the cache and the built
    fixtures are that folder's, shared by its runs: the slow tier does not build again what the default tier did."""
    import os
    import tempfile

    import balance
    import shared_servers

    balance.register(config)
    config.pluginmanager.register(shared_servers, "embtrt-shared-servers")

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:   # a parallel worker (make test): the controller's cache and built fixtures, shared; its own ports
        n = int(worker.removeprefix("gw"))
        os.environ["EMBTRT_PORT_RANGE"] = f"{20000 + 2000 * n}-{21999 + 2000 * n}"
        return
    run = os.environ.get(RUN_ENV)
    if run:   # make test-all's two runs (the default tier, then the slow one) share one cache and one set of builds
        for name, var in (("references", "EMBTRT_REFERENCE_CACHE"), ("shared", SHARED_ENV)):
            os.makedirs(os.path.join(run, name), exist_ok=True)
            os.environ[var] = os.path.join(run, name)
        return   # make test-all removes the folder when both have run
    config._embtrt_ref_cache = tempfile.mkdtemp(prefix="embtrt-test-references-")
    os.environ["EMBTRT_REFERENCE_CACHE"] = config._embtrt_ref_cache
    config._embtrt_shared = tempfile.mkdtemp(prefix="embtrt-test-shared-")
    os.environ[SHARED_ENV] = config._embtrt_shared


def pytest_unconfigure(config):
    import shutil

    for attr in ("_embtrt_ref_cache", "_embtrt_shared"):
        if getattr(config, attr, None):
            shutil.rmtree(getattr(config, attr), ignore_errors=True)


SHARED_ENV = "EMBTRT_TEST_SHARED"
RUN_ENV = "EMBTRT_TEST_RUN_DIR"   # a folder several pytest runs share (make test-all), kept by them


def _once(name: str, fill) -> Path:
    """A run-wide folder `name`, filled by fill(folder) once per test run: the first parallel worker to
    ask builds it under a lock while the other waits, then both use the same files (the session's
    models and repositories are read-only to the tests). A failed fill leaves nothing behind."""
    import fcntl
    import os
    import shutil

    root = Path(os.environ[SHARED_ENV])
    base = root / name
    with open(root / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if not (root / f".{name}.done").exists():
            shutil.rmtree(base, ignore_errors=True)
            base.mkdir(parents=True)
            try:
                fill(base)
            except BaseException:
                shutil.rmtree(base, ignore_errors=True)
                raise
            (root / f".{name}.done").write_text("")
    return base


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    from embtrt.common.corpus import load_corpus

    return load_corpus()


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    from embtrt.reference.modelinfo import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    from tiny_models import MAKERS

    base = _once("tiny_models", lambda b: [make(b / k) for k, make in MAKERS.items()])
    return {k: base / k for k in MAKERS}


@pytest.fixture(scope="session")
def minilm_repo(tmp_path_factory) -> Path:
    """The default build of the bundled all-MiniLM-L6-v2 (python-ort, fused pooling)."""
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    return _once("minilm", lambda b: build(spec_from_options(None, b / "repo"), log=_quiet)) / "repo"


@pytest.fixture(scope="session")
def tiny_repos(tmp_path_factory, tiny_models) -> dict[str, Path]:
    """Each tiny model built with its own pooling; XLM-R with the Python-backend pooler; Qwen3 with a
    front door that calls the bucket encoders over BLS (the path TensorRT repositories use)."""
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    def fill(base: Path) -> None:
        for key, path in tiny_models.items():
            extra = {"xlmr-mean": {"pooler": "python"}, "qwen3-last": {"router_encoder": "bls"}}.get(key, {})
            build(spec_from_options(path, base / key, name=key.replace("-", "_"), **extra), log=_quiet)

    base = _once("tiny_repos", fill)
    return {key: base / key for key in tiny_models}


@pytest.fixture(scope="session")
def cross_encoders(tmp_path_factory) -> dict[str, Path]:
    """Tiny random cross-encoders (tests/tiny_models.py CROSS_ENCODERS), as CrossEncoder.save writes them."""
    from tiny_models import CROSS_ENCODERS

    base = _once("cross_encoders", lambda b: [make(b / k) for k, make in CROSS_ENCODERS.items()])
    return {k: base / k for k in CROSS_ENCODERS}


@pytest.fixture(scope="session")
def minilm_cross_encoder(tmp_path_factory) -> tuple[Path, Path]:
    """(folder, built repository, name minilm_ce) of the bundled MiniLM encoder with a seeded one-label head."""
    from tiny_models import make_minilm_cross_encoder

    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    def fill(base: Path) -> None:
        build(spec_from_options(make_minilm_cross_encoder(base / "minilm-ce"), base / "repo", name="minilm_ce"),
              log=_quiet)

    base = _once("minilm_ce", fill)
    return base / "minilm-ce", base / "repo"


@pytest.fixture(scope="session")
def rerank_repos(tmp_path_factory, cross_encoders) -> dict[str, Path]:
    """Each cross-encoder built as a reranker (python-ort), named after its key (bert_ce, xlmr_ce3, qwen3_ce);
    qwen3_ce with --router-encoder bls (its front door calls one encoder model per bucket, the
    onnxruntime target's path, served here on the Python backend)."""
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    def fill(base: Path) -> None:
        for key, path in cross_encoders.items():
            extra = {"qwen3-ce": {"router_encoder": "bls"}}.get(key, {})
            build(spec_from_options(path, base / key, name=key.replace("-", "_"), **extra), log=_quiet)

    base = _once("rerank_repos", fill)
    return {key: base / key for key in cross_encoders}


@pytest.fixture(scope="session")
def rerank_repo(cross_encoders, rerank_repos) -> tuple[Path, Path]:
    """(model folder, built repository) of the one-label BERT cross-encoder."""
    return cross_encoders["bert-ce"], rerank_repos["bert-ce"]


@pytest.fixture(scope="session")
def rerank_server(rerank_repos, tmp_path_factory):
    """One tritonserver serving every tiny reranker repository (models bert_ce, xlmr_ce3, qwen3_ce)."""
    first, *more = rerank_repos.values()
    yield from _shared("rerank_server", start_server(first, tmp_path_factory.mktemp("rerank_srv"), *more))


@pytest.fixture(scope="session")
def classifiers(tmp_path_factory) -> dict[str, Path]:
    """Tiny random sequence classifiers (tests/tiny_models.py CLASSIFIERS), as transformers saves them."""
    from tiny_models import CLASSIFIERS

    base = _once("classifiers", lambda b: [make(b / k) for k, make in CLASSIFIERS.items()])
    return {k: base / k for k in CLASSIFIERS}


@pytest.fixture(scope="session")
def classifier_repos(tmp_path_factory, classifiers) -> dict[str, Path]:
    """Each classifier built (python-ort, max length 64), named after its key (bert_cls3, xlmr_ml4)."""
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    def fill(base: Path) -> None:
        for key, path in classifiers.items():
            build(spec_from_options(path, base / key, name=key.replace("-", "_"), max_seq_length=64), log=_quiet)

    base = _once("classifier_repos", fill)
    return {key: base / key for key in classifiers}


@pytest.fixture(scope="session")
def classifier_server(classifier_repos, tmp_path_factory):
    """One tritonserver serving both tiny classifiers (models bert_cls3, xlmr_ml4)."""
    first, *more = classifier_repos.values()
    yield from _shared("classifier_server", start_server(first, tmp_path_factory.mktemp("classifier_srv"), *more))


@pytest.fixture(scope="session")
def multivectors(tmp_path_factory) -> dict[str, Path]:
    """Tiny seeded multi-vector folders (tests/tiny_multivector.py): a ColBERT MultiVectorEncoder and a
    bge-m3-shaped XLM-R with both head files."""
    from tiny_multivector import MULTIVECTOR

    base = _once("multivectors", lambda b: [make(b / k) for k, make in MULTIVECTOR.items()])
    return {k: base / k for k in MULTIVECTOR}


@pytest.fixture(scope="session")
def multivector_repos(multivectors) -> dict[str, Path]:
    """Each multi-vector folder built (python-ort) on half the corpus, named after its key (colbert, m3), and
    the ColBERT folder for python-torch (colbert_torch: its encoder reads the heads shipped beside 1/hf/)."""
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    def fill(base: Path) -> None:
        corpus = _sparse_corpus(base)
        for key, path in multivectors.items():
            build(spec_from_options(path, base / key, name=key), corpus=corpus, log=_quiet)
        build(spec_from_options(multivectors["colbert"], base / "colbert_torch", name="colbert_torch",
                                target="python-torch"), corpus=corpus, log=_quiet)

    base = _once("multivector_repos", fill)
    return {key: base / key for key in (*multivectors, "colbert_torch")}


@pytest.fixture(scope="session")
def multivector_server(multivector_repos, tmp_path_factory):
    """One tritonserver serving both tiny multi-vector models (colbert, m3)."""
    first, *more = multivector_repos.values()
    yield from _shared("multivector_server", start_server(first, tmp_path_factory.mktemp("multivector_srv"), *more))


@pytest.fixture(scope="session")
def clips(tmp_path_factory) -> dict[str, Path]:
    """The tiny seeded CLIP (tests/tiny_images.py) as sentence-transformers saves it (clip) and in the old
    CLIPModel-module layout (clip_old: its Hugging Face files in 0_CLIPModel/)."""
    from tiny_images import make_clip, make_old_clip

    base = _once("clips", lambda b: make_old_clip(b / "clip_old", make_clip(b / "clip")))
    return {"clip": base / "clip", "clip_old": base / "clip_old"}


@pytest.fixture(scope="session")
def clip_repos(clips) -> dict[str, Path]:
    """The tiny CLIP built for python-ort (clip) and, from its old layout, for python-torch (clip_old_torch),
    on half the corpus."""
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    def fill(base: Path) -> None:
        corpus = _sparse_corpus(base)
        build(spec_from_options(clips["clip"], base / "clip", name="clip"), corpus=corpus, log=_quiet)
        build(spec_from_options(clips["clip_old"], base / "clip_old_torch", name="clip_old_torch", target="python-torch"),
              corpus=corpus, log=_quiet)

    base = _once("clip_repos", fill)
    return {key: base / key for key in ("clip", "clip_old_torch")}


@pytest.fixture(scope="session")
def clip_server(clip_repos, minilm_repo, tmp_path_factory):
    """One tritonserver serving both tiny CLIP builds and the default MiniLM (a text-only embedder beside them)."""
    yield from _shared("clip_server", start_server(clip_repos["clip"], tmp_path_factory.mktemp("clip_srv"),
                                                   clip_repos["clip_old_torch"], minilm_repo))


def _sparse_build(tmp_path_factory, maker: str, folder: str, name: str, options: dict | None = None,
                  step: int = 2, **kw) -> tuple[Path, Path]:
    """(model folder, built repository `name`, built with `options`, gated on every `step`-th corpus text) of
    tiny_models' `maker` SparseEncoder."""
    import tiny_models

    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    def fill(base: Path) -> None:
        path = getattr(tiny_models, maker)(base / folder, **kw)
        build(spec_from_options(path, base / "repo", name=name, **(options or {})),
              corpus=_sparse_corpus(base, step), log=_quiet)

    base = _once(name, fill)
    return base / folder, base / "repo"


def _sparse_corpus(base: Path, step: int = 2) -> Path:
    """Every `step`-th text of the bundled corpus (185 of 370 for 2, every length kept): the sparse gate's
    reference (SparseEncoder over a 30522-wide MLM head) took 21 of a tiny SPLADE build's 25 s on the
    full corpus; with this half a build takes 14.7 s instead of 25.2 (AMD EPYC, 2 cores), and the
    fixtures build four. The gate is the same; the default model's builds keep the full corpus."""
    from embtrt.common.corpus import load_corpus

    out = base / f"corpus-every-{step}.json"
    out.write_text(json.dumps(load_corpus()[::step]))
    return out


@pytest.fixture(scope="session")
def splade(tmp_path_factory) -> tuple[Path, Path]:
    """(model folder, built repository) of a tiny SPLADE SparseEncoder with query/document prompts."""
    return _sparse_build(tmp_path_factory, "make_bert_splade", "bert-splade", "splade")


@pytest.fixture(scope="session")
def splade_if(tmp_path_factory) -> tuple[Path, Path]:
    """(model folder, built repository) of a tiny inference-free SPLADE (static query side), name splade_if,
    with --router-encoder bls: its documents go through one encoder model per bucket."""
    return _sparse_build(tmp_path_factory, "make_inference_free_splade", "if-splade", "splade_if",
                         {"router_encoder": "bls"})


@pytest.fixture(scope="session")
def minilm_splade(tmp_path_factory) -> tuple[Path, Path]:
    """(model folder, built repository, name minilm_splade) of the bundled MiniLM encoder as a SPLADE
    with a seeded MLM head (slow tests and benchmarks/run_sparse.sh only: a 30522-wide output), gated on a
    quarter of the corpus (93 texts, every length; its reference over the whole corpus was most of a 2-minute
    build, over half of it 98 s of make test-all's slow tier)."""
    return _sparse_build(tmp_path_factory, "make_minilm_splade", "minilm-splade", "minilm_splade", step=4)


@pytest.fixture(scope="session")
def splade_k(tmp_path_factory) -> tuple[Path, Path]:
    """(model folder, built repository) of the tiny SPLADE with the folder's max_active_dims 8, name splade_k."""
    return _sparse_build(tmp_path_factory, "make_bert_splade", "bert-splade-k8", "splade_k", max_active_dims=8)


@pytest.fixture(scope="session")
def splade_kg(splade_k, tmp_path_factory) -> Path:
    """The splade_k folder built with --active-dims-in-graph (its top 8 kept in the ONNX graph), name splade_kg."""
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    def fill(base: Path) -> None:
        build(spec_from_options(splade_k[0], base / "repo", name="splade_kg", active_dims_in_graph=True),
              corpus=_sparse_corpus(base), log=_quiet)

    return _once("splade_kg", fill) / "repo"


@pytest.fixture(scope="session")
def splade_server(splade, splade_if, splade_k, splade_kg, tmp_path_factory):
    """One tritonserver serving the SPLADE (model splade), the inference-free SPLADE (splade_if),
    the SPLADE with a folder max_active_dims (splade_k) and that one with its top-K in the graph
    (splade_kg)."""
    yield from _shared("splade_server", start_server(splade[1], tmp_path_factory.mktemp("splade_srv"), splade_if[1],
                                                     splade_k[1], splade_kg))


def _shared(name: str, srv):
    """A session server (tests/shared_servers.py): stopped while no test needs it, started again for the next."""
    import shared_servers

    with srv:
        shared_servers.hold(name, srv)
        try:
            yield srv
        finally:
            shared_servers.release(name)


def start_server(repo: Path, tmp_path: Path, *more: Path):
    """A tritonserver (not yet started) on free loopback ports serving `repo` and the repositories
    `more`, logging to tmp_path/tritonserver.log, stopped without a graceful unload."""
    from embtrt.serve.server import ServerSpec, TritonServer, free_port

    spec = ServerSpec(repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                      log_file=tmp_path / "tritonserver.log", more_repositories=tuple(more), graceful_exit=False)
    return TritonServer(spec)


@pytest.fixture(scope="session")
def minilm_server(minilm_repo, tmp_path_factory):
    with start_server(minilm_repo, tmp_path_factory.mktemp("srv")) as srv:
        yield srv


@pytest.fixture(scope="session")
def ov_server(tmp_path_factory):
    """MiniLM on python-openvino fp32 (name minilm_ov), served: the CPU target's end-to-end check and
    the second deployment of `verify --against`."""
    pytest.importorskip("openvino")
    from embtrt.common.corpus import load_corpus
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    def fill(b: Path) -> None:   # gated on every other corpus text (every length); test_python_openvino.py's
        (b / "half.json").write_text(json.dumps(load_corpus()[::2]))   # verify then judges the whole corpus served
        build(spec_from_options(None, b / "repo", name="minilm_ov", target="python-openvino", precision="fp32"),
              corpus=b / "half.json", log=_quiet)

    base = _once("ov", fill)
    srv = start_server(base / "repo", tmp_path_factory.mktemp("ov"))
    srv.repository = base / "repo"
    yield from _shared("ov_server", srv)


@pytest.hookimpl(optionalhook=True)   # a hook of pytest-xdist's: unknown where it is not loaded (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """make test's `--dist loadfile` with a shared server's files as one unit (tests/shared_servers.py)."""
    import os

    import shared_servers

    if config.getvalue("dist") != "loadfile" or not os.environ.get(SHARED_ENV):
        return None
    return shared_servers.make_scheduler(config, log, os.environ[SHARED_ENV])


def pytest_collection_modifyitems(config, items):
    """Files longest first, a shared server's files next to each other (tests/balance.py: the workers end
    together; tests/shared_servers.py). The deploy test (tests/deploy)
    runs only when asked for (`-m deploy`, make deploy-test): it builds images and starts pods with podman
    as root, for minutes. (A tests/deploy/conftest.py would shadow this conftest module for the tests that
    import from it.)"""
    import os

    import balance
    import shared_servers

    balance.order(items, balance.tier(config), shared_servers.groups(items))
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(SHARED_ENV):
        shared_servers.publish(items, os.environ[SHARED_ENV])
    if "deploy" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="the deploy test runs only with -m deploy (make deploy-test)")
    for item in items:
        if "deploy" in item.keywords:
            item.add_marker(skip)
