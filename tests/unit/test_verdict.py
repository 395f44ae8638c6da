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
