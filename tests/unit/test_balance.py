"""tests/balance.py: files go to the workers longest first (per tier), each file's tests in their order;
the recorder adds up a file's reports and keeps the other tiers' figures."""

import json
from types import SimpleNamespace

import balance


def _items(*ids: str) -> list:
    return [SimpleNamespace(nodeid=i) for i in ids]


def test_files_longest_first_in_their_tier_tests_in_order(monkeypatch, tmp_path):
    f = tmp_path / "durations.json"
    f.write_text(json.dumps({"fast": {"a.py": 1.0, "b.py": 9.0}, "slow": {"a.py": 50.0}}))
    monkeypatch.setattr(balance, "DURATIONS", f)
    items = _items("a.py::t1", "a.py::t2", "c.py::t", "b.py::t1", "b.py::t2")
    balance.order(items, "fast")
    assert [i.nodeid for i in items] == ["b.py::t1", "b.py::t2", "a.py::t1", "a.py::t2", "c.py::t"]
    items = _items("c.py::t", "b.py::t", "a.py::t")
    balance.order(items, "other")   # no figures for the tier: the collection order
    assert [i.nodeid for i in items] == ["c.py::t", "b.py::t", "a.py::t"]


def test_the_recorder_sums_a_files_reports_beside_the_other_tiers(tmp_path):
    f = tmp_path / "d.json"
    f.write_text(json.dumps({"slow": {"x.py": 3.0}}))
    r = balance.Recorder(str(f), "fast")
    for nodeid, s in (("a.py::t1", 1.25), ("a.py::t1", 0.5), ("b.py::t", 2.0)):
        r.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=s))
    r.pytest_sessionfinish(None)
    assert json.loads(f.read_text()) == {"fast": {"a.py": 1.8, "b.py": 2.0}, "slow": {"x.py": 3.0}}
