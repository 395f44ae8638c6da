"""A build is reproducible: the same folder and flags write the same repository, whatever the
clock and the load of the build machine say. Every config.pbtxt and every served file is
compared byte for byte; the manifest may differ only in `built_at` and the output paths.

What this catches: a value timed at build time (the front door's run overhead was once fitted to
the encoder's timings, 35 to 95 tokens for the same folder, and the serving speed followed it)."""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from pathlib import Path

import pytest

from embtrt.export import build
from embtrt.export.spec_options import spec_from_options


def _manifest(repo: Path) -> dict:
    doc = json.loads((repo / "embtrt.json").read_text().replace(str(repo.resolve()), "<out>").replace(str(repo), "<out>"))
    doc.pop("built_at")
    return doc


def repository_differences(a: Path, b: Path) -> list[str]:
    """Every file of repository a against b: the paths only one has, the files whose bytes differ
    (embtrt.json: apart from built_at and the output paths). A served repository also holds the
    bytecode its stubs wrote on import (model.py's): bytecode only `a` has is not the build's. The
    build's own (the bundle's) must be hash-based, so its bytes depend on the sources alone."""
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    timed = [p for p in files_b if p.suffix == ".pyc" and (b / p).read_bytes()[4:8] == bytes(4)]
    assert not timed, f"timestamp-based bytecode in the build: {timed[:3]}"
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_a -= {p for p in files_a - files_b if "__pycache__" in p.parts}
    out = [f"only in the first: {p}" for p in sorted(files_a - files_b)]
    out += [f"only in the second: {p}" for p in sorted(files_b - files_a)]
    for rel in sorted(files_a & files_b):
        if rel == Path("embtrt.json"):
            ma, mb = _manifest(a), _manifest(b)
            if ma != mb:
                keys = sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k))
                spec = sorted(k for k in ma.get("spec", {}) if ma["spec"][k] != mb.get("spec", {}).get(k))
                out.append(f"embtrt.json differs in {keys} (spec: {spec})")
        elif (a / rel).read_bytes() != (b / rel).read_bytes():
            out.append(f"differs: {rel}")
    return out


class _JitteryClock:
    """A perf_counter that still only moves forward, by seeded random steps of up to 20 ms: any value
    a build derives from timing it comes out different from a build under the real clock."""

    def __init__(self, seed: int) -> None:
        self.rng, self.now = random.Random(seed), time.perf_counter()

    def __call__(self) -> float:
        self.now += self.rng.uniform(0.0, 0.02)
        return self.now

    def ns(self) -> int:
        return int(self() * 1e9)


def _busy(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def test_a_build_does_not_depend_on_the_clock(tiny_models, tiny_repos, tmp_path, monkeypatch):
    """The tiny BERT built again (the same options as the tiny_repos fixture) under a clock that
    jumps at random: every config and served file equal, the manifest too but for built_at and paths."""
    clock = _JitteryClock(7)
    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(time, "perf_counter_ns", clock.ns)
    monkeypatch.setattr(time, "monotonic", _JitteryClock(8))
    again = tmp_path / "bert-cls"
    build(spec_from_options(tiny_models["bert-cls"], again, name="bert_cls"), log=lambda m: None)
    monkeypatch.undo()
    assert (again / "bert_cls" / "config.pbtxt").is_file()
    assert repository_differences(tiny_repos["bert-cls"], again) == []


@pytest.mark.slow  # four more tiny builds (make test-all)
@pytest.mark.parametrize("kind", ["reranker", "sparse"])
def test_two_builds_minutes_apart_one_beside_a_busy_core_are_identical(kind, cross_encoders, splade, tmp_path):
    """Each of the other kinds built twice from the same folder and flags, the second while a busy
    loop holds one of the cores: the same repository (configs, served files, manifest)."""
    folder = cross_encoders["bert-ce"] if kind == "reranker" else splade[0]
    first, second = tmp_path / "first", tmp_path / "second"
    build(spec_from_options(folder, first, name="m"), log=lambda m: None)
    stop = multiprocessing.Event()
    hog = multiprocessing.Process(target=_busy, args=(stop,), daemon=True)
    hog.start()
    try:
        build(spec_from_options(folder, second, name="m"), log=lambda m: None)
    finally:
        stop.set()
        hog.join(timeout=30)
        if hog.is_alive():
            hog.kill()
    assert repository_differences(first, second) == []
