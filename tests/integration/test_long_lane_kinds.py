"""The long-text lane for every kind (#50: one front door for every kind): with long_row_tokens
lowered so that corpus texts count as long, a reranker's pairs (its front door running ONNX Runtime
itself, and one calling its bucket encoders over BLS) and a sparse encoder's texts, sent at once as
short, long and mixed requests, each equal the reference (CrossEncoder.predict,
SparseEncoder.encode_document), and each model's lanes took their slots. Before, the reranker's and
sparse encoder's front doors kept long inputs in execute() (no lane)."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import start_server
from embtrt.kinds.sparse.reference import load_sparse_encoder, se_encode
from embtrt.kinds.reranker.serve import RerankClient
from embtrt.kinds.sparse.serve import SparseClient

pytestmark = pytest.mark.integration
LONG_BYTES = 60
RERANKERS = {"bert-ce": "bert_ce", "qwen3-ce": "qwen3_ce"}   # local ONNX Runtime; BLS to the bucket encoders


def _lower(repo: Path, dst: Path, name: str) -> Path:
    shutil.copytree(repo, dst, symlinks=True)
    cfg = dst / name / "config.pbtxt"
    text, n = re.subn(r'(key: "long_row_tokens"\s*value: \{ string_value: ")\d+', rf"\g<1>{LONG_BYTES}", cfg.read_text())
    assert n == 1, "the front door's config renders long_row_tokens"
    cfg.write_text(text)
    return dst


def test_long_pairs_and_texts_run_on_the_lane_and_equal_the_reference(rerank_repos, cross_encoders, splade, corpus,
                                                                       tmp_path):
    from sentence_transformers import CrossEncoder

    repos = [_lower(rerank_repos[k], tmp_path / k, n) for k, n in RERANKERS.items()]
    repos.append(_lower(splade[1], tmp_path / "splade", "splade"))
    query = corpus[0].split(".")[0][:20]
    short = [t for t in corpus if len(t.encode()) + len(query.encode()) <= LONG_BYTES][:8]
    long = [t for t in corpus if len(t.encode()) > 3 * LONG_BYTES][:8]
    assert len(short) == 8 and len(long) == 8
    batches = [[t] for t in short] + [[t] for t in long] + [[short[i], long[i]] for i in range(4)]
    texts = sorted({t for b in batches for t in b})
    want = {n: dict(zip(texts, CrossEncoder(str(cross_encoders[k]), device="cpu").predict([(query, t) for t in texts]), strict=True))
            for k, n in RERANKERS.items()}
    dense = se_encode(load_sparse_encoder(splade[0]), texts, "document")
    want["splade"] = dict(zip(texts, dense, strict=True))
    for name, w in want.items():   # the references tell the texts apart
        v = np.array([np.atleast_1d(x) for x in w.values()], dtype=np.float64)
        assert float(np.ptp(v, axis=0).max()) > 1e-3, name
    failures: list[str] = []
    got: list[tuple[str, list[str], np.ndarray]] = []
    with start_server(repos[0], tmp_path, *repos[1:]) as srv:
        def client(k: int) -> None:
            for name in (*RERANKERS.values(), "splade"):
                try:
                    c = SparseClient(srv.grpc_url, name, retries=0) if name == "splade" else \
                        RerankClient(srv.grpc_url, name, retries=0)
                    with c:
                        for j in range(k, len(batches) * 2, 6):
                            b = batches[j % len(batches)]
                            out = c.encode_dense(b, input_type="document") if name == "splade" else c.score(query, b)[0][:, 0]
                            got.append((name, b, out))
                except Exception as exc:  # noqa: BLE001 (recorded, asserted below)
                    failures.append(f"{name}: {exc}")

        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        slots = sorted(p.parent.name for p in srv.drain_flag.parent.glob("embtrt-long-rows-*/slot-*"))
    assert not failures, failures[:3]
    assert len(got) == 3 * 2 * len(batches)
    for name, b, out in got:
        diff = float(np.abs(np.asarray(out, dtype=np.float64) - np.array([want[name][t] for t in b])).max())
        assert diff <= 1e-4, (name, b, diff)
    assert {s.rsplit("-", 1)[1] for s in slots} >= {"bert_ce", "qwen3_ce", "splade"}, slots
