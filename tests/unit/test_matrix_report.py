"""The matrix's preemption cell in its report: the short load's latencies and the verdict (#54 part 2)."""

from dataclasses import asdict

from embtrt.measure.matrix import Cell
from embtrt.measure.report import matrix_markdown


def _doc(passed: bool) -> dict:
    cell = Cell(16384, "preempt", "b16k", 64, sent=1, ok=1, cos_min=1.0)
    cell.extra = {"long_tokens": 16084, "passed": passed,
                  "load": {"sent": 900, "ok": 900 if passed else 855, "errors": 0 if passed else 45,
                           "error_kinds": {} if passed else {"timeout": 45}, "req_per_s": 300.0,
                           "p50_ms": 31.5, "p95_ms": 60.0, "p99_ms": 84.2, "max_ms": 577.0, "cos_min": 1.0}}
    return {"model": "b16k", "target": "python-ort", "precision": "fp32", "machine": {"cpu": "x", "cpus": 2},
            "built_budget": 16384, "max_batch_size": 32, "requests_per_cell": 4, "bands": {"<=32": {"tokens": [3, 32]}},
            "budgets": [16384], "server_max_batch": {}, "preempt_passed": passed, "cells": [asdict(cell)]}


def test_the_preemption_row_shows_the_short_latencies_and_its_verdict():
    ok = matrix_markdown(_doc(True))
    assert "passed: 16084-token text under short load: load 900/900 ok" in ok
    assert "p50 31.5 ms, p99 84.2 ms, max 577 ms" in ok
    bad = matrix_markdown(_doc(False))
    assert "FAILED: 16084-token text" in bad and "load 855/900 ok" in bad


def test_embtrt_matrix_exits_1_and_says_why_when_the_preemption_cell_failed(monkeypatch, tmp_path):
    """The CLI's verdict follows the document run_matrix returns (the run itself is measured by
    test_16k.py's matrix tests): a failed preemption cell is exit 1 with a message, a passed one 0."""
    from typer.testing import CliRunner

    import embtrt.measure.matrix as matrix
    from embtrt.cli import app

    for passed, code in ((True, 0), (False, 1)):
        monkeypatch.setattr(matrix, "run_matrix", lambda spec, log, p=passed: _doc(p))
        r = CliRunner().invoke(app, ["matrix", str(tmp_path), "--max-batch-tokens", "16384"])
        assert r.exit_code == code, r.output
        assert ("the preemption cell failed" in r.output) is (not passed), r.output
