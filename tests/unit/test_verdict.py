"""The one verdict type of the gates and `verify` (reference/verdict.py)."""

from embtrt.reference.verdict import Verdict


def test_checks_mark_their_lines_and_only_failed_ones_decide():
    v = Verdict({"texts": 3})
    assert v.check(True, "bucket 32: fine", "never recorded")
    assert not v.check(False, "bucket 64: max 2e-4 (limit 1e-4)", "bucket 64: 2e-4 > 1e-4", "and a second cause")
    assert not v.check(False, "ranking differs")
    assert v.lines == ["[ok] bucket 32: fine", "[x] bucket 64: max 2e-4 (limit 1e-4)", "[x] ranking differs"]
    assert v.failures == ["bucket 64: 2e-4 > 1e-4", "and a second cause", "ranking differs"]
    assert not v.passed
    assert list(v.as_dict()) == ["texts", "passed", "failures", "lines"]
    assert v.as_dict(lines=False) == {"texts": 3, "passed": False, "failures": v.failures}


def test_a_verdict_added_under_a_key_keeps_its_figures_apart():
    outer, gate = Verdict({"kind": "reranker"}), Verdict({"pairs": 8})
    outer.check(True, "under load: fine")
    gate.check(False, "bucket 32: off", "bucket 32 differs")
    outer.add(gate, "gate")
    assert outer.lines == ["[ok] under load: fine", "[x] bucket 32: off"] and outer.failures == ["bucket 32 differs"]
    assert outer.figures["gate"] == {"pairs": 8, "passed": False, "failures": ["bucket 32 differs"]}
    assert Verdict().add(Verdict({"a": 1})).figures == {"a": 1} and Verdict().passed


def test_the_embedders_cosine_gate_and_verify_are_verdicts_that_fail_on_nan_vectors():
    import numpy as np

    from embtrt.kinds.embedder.measure import LoadReport, VerifyReport
    from embtrt.reference.parity import GateReport, evaluate
    from embtrt.repository.gate import Gate

    rng = np.random.default_rng(3)
    ref = rng.normal(size=(12, 6))
    same = evaluate(ref, ref + 1e-9, ["<=32"] * 6 + ["<=128"] * 6, Gate())
    assert isinstance(same, Verdict) and isinstance(same, GateReport) and same.passed
    assert [line[:24] for line in same.lines[:2]] == ["[ok] bucket     <=32: n=", "[ok] bucket    <=128: n="]
    nan = evaluate(ref, np.full_like(ref, np.nan), ["<=32"] * 12, Gate())
    assert not nan.passed and nan.failures[0] == "bucket <=32: cosine p50 nan < 0.9999"
    load = LoadReport(8, 40, 40, 1, 0, 1.0, 0.99, 0.999, 0)
    rep = VerifyReport("m", "ref", same, {}, ["w"], load)
    assert isinstance(rep, Verdict) and not rep.passed and rep.failures == ["under-load check"]
    assert rep.lines[0] == "verify m against ref" and rep.lines[-2:] == ["warning: w", "FAILED: under-load check"]
    assert rep.lines[-3].startswith("[x] under load: 40 texts in 40 mixed-length requests at concurrency 8")
    assert list(rep.as_dict()) == ["model", "reference", "passed", "identity", "warnings", "gate", "under_load"]
