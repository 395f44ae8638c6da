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


def test_a_groups_files_go_together_by_their_added_seconds(monkeypatch, tmp_path):
    """Files sharing a session server (tests/shared_servers.py) are one unit: b.py and d.py (1 + 8 s) go before
    a.py (5 s), together, in their collection order; with no figures the groups still go together."""
    f = tmp_path / "durations.json"
    f.write_text(json.dumps({"fast": {"a.py": 5.0, "b.py": 1.0, "c.py": 0.5, "d.py": 8.0}}))
    monkeypatch.setattr(balance, "DURATIONS", f)
    groups = {"b.py": "srv", "d.py": "srv"}
    items = _items("a.py::t", "b.py::t1", "c.py::t", "d.py::t", "b.py::t2")
    balance.order(items, "fast", groups)
    assert [i.nodeid for i in items] == ["b.py::t1", "d.py::t", "b.py::t2", "a.py::t", "c.py::t"]
    items = _items("a.py::t", "b.py::t", "c.py::t", "d.py::t")
    balance.order(items, "none", groups)
    assert [i.nodeid for i in items] == ["a.py::t", "b.py::t", "d.py::t", "c.py::t"]


def test_the_recorder_sums_a_files_reports_beside_the_other_tiers(tmp_path):
    f = tmp_path / "d.json"
    f.write_text(json.dumps({"slow": {"x.py": 3.0}}))
    r = balance.Recorder(str(f), "fast")
    for nodeid, s in (("a.py::t1", 1.25), ("a.py::t1", 0.5), ("b.py::t", 2.0)):
        r.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=s))
    r.pytest_sessionfinish(None)
    assert json.loads(f.read_text()) == {"fast": {"a.py": 1.8, "b.py": 2.0}, "slow": {"x.py": 3.0}}
