"""Long texts run off the front door's instance (embtrt_backend.long_rows) on a real tritonserver:
with long_row_tokens lowered so that corpus texts count as long, concurrent requests of short,
long and mixed texts each come back equal to the PyTorch reference, through the front door
that runs ONNX Runtime itself (tiny BERT) and the one that calls its bucket encoders over BLS (tiny
Qwen3), and the lanes took their slots. The 16K case is measured by benchmarks/preempt.py."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

import pytest

from conftest import start_server
from embtrt.reference.parity import cosine_rows
from embtrt.reference.torch_ref import TorchReference
from embtrt.serve.client import EmbeddingClient

pytestmark = pytest.mark.integration
KEYS = {"bert-cls": "bert_cls", "qwen3-last": "qwen3_last"}
LONG_BYTES = 60


def _lower(repo: Path, dst: Path, name: str) -> Path:
    shutil.copytree(repo, dst, symlinks=True)
    cfg = dst / name / "config.pbtxt"
    text, n = re.subn(r'(key: "long_row_tokens"\s*value: \{ string_value: ")\d+', rf"\g<1>{LONG_BYTES}", cfg.read_text())
    assert n == 1, "the front door's config renders long_row_tokens"
    cfg.write_text(text)
    return dst


def _reference(folder: Path, texts: list[str]):
    """PyTorch with the build's own pooling (the tiny Qwen3 folder has no modules.json, so
    sentence-transformers would mean-pool it; test_serve_e2e checks both agree where it has one)."""
    from embtrt.export.spec_options import spec_from_options

    spec = spec_from_options(folder, Path("unused"))
    return TorchReference(spec.model_dir, spec.pooling, spec.normalize, spec.max_seq_length, spec.input_names).embed(texts)


def test_long_requests_run_on_the_lane_and_every_request_equals_the_reference(tiny_models, tiny_repos, corpus, tmp_path):
    repos = [_lower(tiny_repos[k], tmp_path / k, n) for k, n in KEYS.items()]
    short = [t for t in corpus if len(t.encode()) <= LONG_BYTES][:12]
    long = [t for t in corpus if len(t.encode()) > 3 * LONG_BYTES][:12]
    assert len(short) == 12 and len(long) == 12
    batches = [[t] for t in short] + [[t] for t in long] + [[short[i], long[i]] for i in range(6)]
    texts = sorted({t for b in batches for t in b})
    want = {k: dict(zip(texts, _reference(tiny_models[k], texts), strict=True)) for k in KEYS}
    failures: list[str] = []
    got: list[tuple[str, list[str], object]] = []
    with start_server(repos[0], tmp_path, repos[1]) as srv:
        def client(k: int) -> None:
            for key, name in KEYS.items():
                with EmbeddingClient(srv.grpc_url, name, retries=0) as c:
                    for j in range(k, len(batches) * 2, 8):
                        b = batches[j % len(batches)]
                        try:
                            got.append((key, b, c.embed(b)))
                        except Exception as exc:  # noqa: BLE001 (recorded, asserted below)
                            failures.append(f"{name}: {exc}")

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        slots = sorted(p.parent.name for p in srv.drain_flag.parent.glob("embtrt-long-rows-*/slot-*"))
    assert not failures, failures[:3]
    assert len(got) == 2 * 2 * len(batches)
    for key, b, vecs in got:
        assert cosine_rows(vecs, [want[key][t] for t in b]).min() >= 0.9999, (key, b)
    assert {s.rsplit("-", 1)[1] for s in slots} >= {"bert_cls", "qwen3_last"}, slots
