"""The request path's own parts, without Triton: the front door's stage clock, threads sized from
the host's cores, the batch plan, the offset-free batch tokenization, the load generator's wire format."""

import os
import struct

import numpy as np
import pytest

from embtrt_backend.host import instances_of, size_threads, threads_per_instance
from embtrt_backend.routing import plan
from embtrt_backend.stages import NULL, STAGES, StageClock


def test_stage_clock_gives_each_stage_the_time_since_the_last_mark(monkeypatch):
    ticks = iter([0, 100, 350, 400, 1000, 1600])   # perf_counter_ns readings
    monkeypatch.setattr("embtrt_backend.stages.time.perf_counter_ns", lambda: next(ticks))
    seen = []
    clock = StageClock(sink=lambda ns, requests, rows: seen.append((dict(ns), requests, rows)))
    clock.start()                 # 100
    clock.mark("read")            # 350: read 250
    clock.mark("encode")          # 400: encode 50
    clock.mark("encode")          # 1000: encode += 600 (a stage marked twice adds up)
    clock.mark("respond")         # 1600: respond 600
    clock.flush(3, 5)
    ns, requests, rows = seen[0]
    assert (ns["read"], ns["encode"], ns["respond"], requests, rows) == (250, 650, 600, 3, 5)
    assert sum(ns.values()) == 1500 and set(ns) == set(STAGES)
    totals = clock.totals()
    assert totals["executions"] == 1 and totals["requests"] == 3 and totals["stage_seconds"]["encode"] == 650e-9


def test_stage_clock_keeps_each_threads_execute_apart():
    """The long-text lane runs executes on its own thread beside the instance's: one clock, two executes."""
    import threading

    clock = StageClock()
    clock.start()
    clock.mark("read")
    other = threading.Thread(target=lambda: (clock.start(), clock.add_rows(7), clock.mark("encode"), clock.flush(2)))
    other.start()
    other.join()
    clock.add_rows(3)
    clock.mark("respond")
    clock.flush(1)
    assert clock.executions == 2 and clock.requests == 3 and clock.rows == 10
    assert clock.ns["encode"] == 0 and clock.ns["read"] > 0   # this thread's execute was not reset by the other


def test_the_metrics_sink_keeps_what_it_could_not_push_and_pushes_it_at_close():
    from embtrt_backend.stages import TritonMetrics

    class Family:
        COUNTER = "counter"

        def __init__(self, **kw):
            self.metrics = []

        def Metric(self, labels):   # noqa: N802 (pb_utils' name)
            m = Metric(labels)
            self.metrics.append(m)
            return m

    class Metric:
        fail = True

        def __init__(self, labels):
            self.labels, self.value = labels, 0.0

        def increment(self, v):
            if Metric.fail:
                raise RuntimeError("stub busy")
            self.value += v

    class PbUtils:
        MetricFamily = Family

    sink = TritonMetrics(PbUtils, "m", interval_s=3600)
    sink(dict.fromkeys(STAGES, 0) | {"encode": 2_000_000_000}, 4, 9)
    with pytest.raises(RuntimeError):
        sink.push()
    Metric.fail = False
    sink.close()
    assert sink.stage["encode"].value == 2.0 and sink.counts["requests"].value == 4 and sink.counts["rows"].value == 9
    assert sink.counts["executions"].value == 1 and not sink._thread.is_alive()


def test_stage_clock_starts_each_execute_from_zero():
    clock = StageClock()
    clock.start()
    clock.mark("parse")
    clock.flush(1)
    first = clock.total_ns["parse"]
    clock.start()
    clock.flush(1)
    assert clock.ns["parse"] == 0 and clock.total_ns["parse"] == first and clock.executions == 2


def test_the_null_clock_records_nothing():
    NULL.start()
    NULL.mark("tokenize")
    NULL.flush(4)
    assert not NULL.enabled and not hasattr(NULL, "ns")


def test_tokenizer_threads_are_the_cores_shared_by_the_instances(monkeypatch):
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    assert threads_per_instance(2, cores=2) == 1 and threads_per_instance(2, cores=16) == 8
    assert threads_per_instance(4, cores=2) == 1      # never 0
    p = size_threads({"intra_op_threads": "0", "other": "x"}, 2, cores=2)
    assert p == {"intra_op_threads": "0", "other": "x"}   # the encoder's threads stay the runtime's
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    size_threads({}, 2, cores=16)
    assert os.environ["RAYON_NUM_THREADS"] == "8" and "TOKENIZERS_PARALLELISM" not in os.environ


def test_instances_are_summed_over_the_groups():
    assert instances_of({"instance_group": [{"count": 2}, {"count": 3, "kind": "KIND_GPU"}]}) == 5
    assert instances_of({"instance_group": [{"kind": "KIND_CPU"}]}) == 1 and instances_of({}) == 1


@pytest.mark.parametrize("pad_to_bucket", [False, True])
def test_plan_takes_every_row_once_by_bucket_then_length(pad_to_bucket):
    rng = np.random.default_rng(7)
    buckets = (16, 64, 256)
    for _ in range(300):
        n = int(rng.integers(1, 70))
        lengths = rng.integers(1, 257, n)
        limits = tuple(int(x) for x in rng.integers(1, 33, 3))
        chunks = plan(lengths, buckets, limits, int(rng.integers(0, 64)), pad_to_bucket)
        rows = np.concatenate([r for _, r in chunks])
        assert sorted(rows.tolist()) == list(range(n))          # every row, once
        for b, r in chunks:
            assert 1 <= r.size <= limits[b]
            assert np.all(np.searchsorted(buckets, lengths[r]) == b)   # the smallest bucket that holds it
        for b in {b for b, _ in chunks}:   # within a bucket: ascending length, ties in row order
            order = np.concatenate([r for bb, r in chunks if bb == b])
            keys = list(zip(lengths[order].tolist(), order.tolist(), strict=True))
            assert keys == sorted(keys)


def _plan_as_defined(lengths, buckets, limits, overhead, pad_to_bucket):
    """The plan as it was first written (numpy, per bucket, the dynamic program on floats): the definition the
    faster one must equal, plan for plan."""
    idx = np.searchsorted(np.asarray(buckets), lengths, side="left")
    out = []
    for b in np.unique(idx):
        rows = np.nonzero(idx == b)[0]
        rows = rows[np.argsort(lengths[rows], kind="stable")]
        eff = np.full(rows.size, buckets[b]) if pad_to_bucket else lengths[rows]
        n = len(eff)
        best, cut = np.full(n + 1, np.inf), np.zeros(n + 1, dtype=np.int64)
        best[0] = 0.0
        for j in range(1, n + 1):
            for i in range(max(0, j - limits[b]), j):
                cost = best[i] + overhead + (j - i) * float(eff[j - 1])
                if cost < best[j]:
                    best[j], cut[j] = cost, i
        bounds, j = [], n
        while j > 0:
            bounds.append((int(cut[j]), j))
            j = int(cut[j])
        out += [(int(b), rows[s:e].tolist()) for s, e in bounds[::-1]]
    return out


def test_the_plan_equals_its_definition_plan_for_plan():
    rng = np.random.default_rng(11)
    for _ in range(400):
        n = int(rng.integers(0, 60))
        lengths = rng.integers(1, 257, n)
        limits = tuple(int(x) for x in rng.integers(1, 40, 3))
        overhead, pad = int(rng.integers(0, 100)), bool(rng.integers(0, 2))
        got = [(b, r.tolist()) for b, r in plan(lengths, (32, 128, 256), limits, overhead, pad)]
        assert got == _plan_as_defined(lengths, (32, 128, 256), limits, overhead, pad)


def test_a_lone_row_is_one_chunk_of_its_bucket():
    assert [(b, r.tolist()) for b, r in plan(np.array([40]), (32, 128), (8, 8))] == [(1, [0])]


def test_offset_free_batch_tokenization_gives_the_same_rows(minilm_path):
    from embtrt.common.corpus import load_corpus
    from embtrt_backend.text import TextTokenizer

    tok = TextTokenizer(str(minilm_path / "tokenizer.json"), 256, 0)
    texts = load_corpus()[:200] + ["", "ünïcödé 漢字 emoji 🙂", "word " * 400]
    got = tok.encode(texts)
    want = tok.tok.encode_batch(texts, add_special_tokens=True)
    assert len(got.ids) == len(want)
    for i, e in enumerate(want):
        assert got.ids[i] == e.ids and got.type_ids[i] == e.type_ids and got.lengths[i] == len(e.ids)


def test_bytes_tensor_is_tritons_length_prefixed_serialization():
    from embtrt.measure.loadgen import bytes_tensor

    raw = bytes_tensor(("ab", "", "é"))
    assert raw == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0) + struct.pack("<I", 2) + "é".encode()
