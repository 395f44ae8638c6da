"""`embtrt tune`: the serving configuration with the most throughput whose p99 meets an SLO.

The knobs are the ones embtrt renders, on the models that do the work: the front door (it
runs the encoder itself for python-* targets) and, where the front door calls the bucket
encoders (BLS), those encoders too: instance count, the dynamic batcher's max queue delay and
preferred batch sizes, and the encoder threads; and the token budget (`max_batch_tokens`: the
max batch of every bucket's models and the front door's chunking, `repository.budget`; not
for TensorRT, whose engines fix it). Each trial reloads only the changed models
through Triton's repository API (load with a config override; the server runs with
`--model-control-mode=explicit`), then drives the bench engine with the corpus's real texts
(mixed lengths) at every requested concurrency; with a per-bucket SLO (`32=50,512=400`) each
named bucket's band of texts is measured on its own and must meet its own p99, and the
throughput is their sum. A reranker or sparse encoder (its front door runs every bucket itself)
has the front door's knobs only, measured with its kind's own requests (its KindMeasure.trial).

Search: coordinate descent from the repository's own configuration (the baseline trial):
each knob in turn tries its other values with the others held at the best so far; a knob's
best value is kept; rounds repeat while the time budget lasts. Objective: the most req/s at
the highest requested concurrency among trials whose p99 is within the SLO at every
concurrency; within 2% of each other, the lower p50 wins.

A tritonserver tune started that exits mid-search (its Python backend has aborted during a
reload) is started again, up to RESTARTS times: the search replays from its baseline, the trials
already measured answer from their figures and the first one not measured runs on the new server.
"""

from __future__ import annotations

import copy
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from embtrt_backend.liveness import http_status

from ..errors import EmbtrtError, SpecError
from ..repository.budget import manifest_with_budget, with_budget
from ..repository.manifest import read_manifest, write_manifest
from .knobs import BUDGET, Knob, apply_setting, baseline, knobs_for  # noqa: F401 (Knob: a name of this module)
from .reload import load_configs, model_configs
from .report import fmt_settings, machine, write_tune

Log = Callable[[str], None]
MIN_TRIAL_S = 20.0
RESTARTS = 2   # a tritonserver tune started that exits mid-search is started again this many times


def _exit_code(srv) -> int | None:
    """The exit code of a server that has exited, None while it answers."""
    if srv.proc is None or http_status(srv.http_url + "/v2/health/live", 2.0) == 200:
        return None
    try:   # a server that died takes its reaper with it within moments
        return srv.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return None


class TuneError(EmbtrtError):
    exit_code = 9


@dataclass(frozen=True)
class TuneSpec:
    repository: Path
    slo_p99_ms: float | dict[int, float]    # mixed lengths; or per length band: {bucket: ms}
    concurrency: tuple[int, ...] = (1, 8, 32)
    corpus: Path | None = None
    budget_min: float = 10.0
    out: Path | None = None
    apply_to: Path | None = None
    url: str | None = None
    force: bool = False
    requests: int = 200
    warmup: int = 20
    knobs: tuple[str, ...] | None = None     # search only these knobs (default: every knob of the repository)

    def __post_init__(self) -> None:
        slos = self.slo_p99_ms.values() if isinstance(self.slo_p99_ms, dict) else [self.slo_p99_ms]
        if not slos or min(slos) <= 0:
            raise SpecError(f"invalid slo_p99_ms: {self.slo_p99_ms}",
                            "a positive number of milliseconds, or BUCKET=MS per length band, e.g. 32=50,512=400")
        if not self.concurrency or min(self.concurrency) < 1:
            raise SpecError(f"invalid concurrency: {self.concurrency}", "positive integers, e.g. 1,8,32")
        if self.budget_min * 60 < MIN_TRIAL_S:
            raise TuneError(f"a budget of {self.budget_min} min is too small for one trial",
                            f"one trial (reload + measurement) takes at least {MIN_TRIAL_S:.0f} s; pass --budget-min 1 or more")
        if self.apply_to is not None and Path(self.apply_to).resolve() == Path(self.repository).resolve() and not self.force:
            raise SpecError("invalid apply_to: it is the repository being tuned", "pass --force to replace it in place")


@dataclass
class Trial:
    settings: dict[str, Any]
    results: dict[int, dict] = field(default_factory=dict)   # concurrency -> req/s, p50, p99
    seconds: float = 0.0

    def p99(self) -> float:
        return max(r["p99_ms"] for r in self.results.values())

    bands: dict[str, dict[int, dict]] = field(default_factory=dict)  # per-bucket SLO: '<=32' -> concurrency -> figures

    def feasible(self, slo: float | dict[int, float]) -> bool:
        if not self.results:
            return False
        if isinstance(slo, dict):
            return all(max(r["p99_ms"] for r in self.bands[f"<={b}"].values()) <= ms for b, ms in slo.items())
        return self.p99() <= slo

    def throughput(self) -> float:
        return self.results[max(self.results)]["req_per_s"]

    def p50(self) -> float:
        return self.results[max(self.results)]["p50_ms"]


class Tuner:
    def __init__(self, spec: TuneSpec, log: Log = print) -> None:
        self.spec, self.log = spec, log
        self.manifest = read_manifest(spec.repository)
        if not self.manifest.model_kind.length_pools and isinstance(spec.slo_p99_ms, dict):
            raise SpecError(f"invalid slo_p99_ms for {self.manifest.name}, a {self.manifest.kind}: per-bucket SLOs are "
                            "for embedders (whose bands are measured on their own)", "give one p99 in ms, e.g. 200")
        self.knobs = knobs_for(self.manifest, spec.repository)
        if spec.knobs is not None:
            unknown = sorted(set(spec.knobs) - {k.name for k in self.knobs})
            if unknown:
                raise SpecError(f"invalid knobs {unknown} for {self.manifest.name}",
                                "its knobs: " + ", ".join(k.name for k in self.knobs))
            self.knobs = [k for k in self.knobs if k.name in spec.knobs]
        if isinstance(spec.slo_p99_ms, dict):
            bad = sorted(set(spec.slo_p99_ms) - set(self.manifest.buckets))
            if bad:
                raise SpecError(f"invalid slo_p99_ms: {bad} are not buckets of {self.manifest.name}",
                                f"its buckets: {','.join(map(str, self.manifest.buckets))}")
        self.trials: list[Trial] = []
        self._measured: list[Trial] = []   # trials of a server that exited, replayed by the restarted search

    # ---- server --------------------------------------------------------------------------

    def _load(self, url: str, configs: dict[str, dict]) -> None:
        load_configs(url, self.manifest, configs, TuneError,
                     "start it with --model-control-mode=explicit (and --load-model for each model), "
                     "or let `embtrt tune` serve the repository itself (no --url)")

    # ---- measurement ---------------------------------------------------------------------

    def _measure(self, url: str, texts: list[str], counts) -> tuple[dict[int, dict], dict[str, dict[int, dict]]]:
        """One trial's figures, by the kind's own requests (Kind.tune_trial)."""
        from ..common.plugins import implementation

        return implementation(self.manifest.model_kind, "tune_trial")(self.manifest, self.spec, url, texts, counts, TuneError)

    def _configs_for(self, base: dict[str, dict], settings: dict[str, Any]) -> dict[str, dict]:
        cfgs = copy.deepcopy(base)
        for k in self.knobs:
            if k.name == BUDGET:
                cfgs = with_budget(self.manifest, cfgs, int(settings[k.name]))
                continue
            for m in k.models:
                cfgs[m] = apply_setting(cfgs[m], k.name, settings[k.name])
        return cfgs

    def run(self, texts: list[str], counts) -> tuple[Trial, dict[str, dict]]:
        deadline = time.time() + self.spec.budget_min * 60
        if self.spec.url:
            return self._search(self.spec.url, texts, counts, deadline)
        from ..serve.server import ServerSpec, TritonServer, free_port

        models = tuple(sorted(p.parent.name for p in Path(self.spec.repository).glob("*/config.pbtxt")))
        for attempt in range(RESTARTS + 1):
            srv = TritonServer(ServerSpec(self.spec.repository, grpc_port=free_port(), http_port=free_port(),
                                          metrics_port=free_port(), models=models))
            with srv:
                self.log(f"serving {self.spec.repository} on {srv.grpc_url} (explicit model control)")
                try:
                    return self._search(srv.grpc_url, texts, counts, deadline)
                except Exception as exc:
                    code = _exit_code(srv)
                    if code is None:
                        raise   # the server answers: the search's own error
                    why = exc.message if isinstance(exc, EmbtrtError) else f"{type(exc).__name__}: {str(exc)[:300]}"
                    if attempt == RESTARTS:   # the server tune started has exited: say so, with the end of its log
                        raise TuneError(f"{why}; tritonserver exited with code {code} ({attempt + 1} exits "
                                        "in this run):\n{srv.log_tail(15)}", f"its full log: {srv.log_path}") from None
                    self.log(f"tritonserver exited with code {code} during trial {len(self.trials) + 1} ({why[:200]}); "
                             f"restarting it, the {len(self.trials)} trials measured are kept "
                             f"(restart {attempt + 1} of {RESTARTS}); the end of its log:\n{srv.log_tail(5)}")
                    # the search replays from the start: trials measured before answer from here, unmeasured again
                    self._measured, self.trials = self._measured + self.trials, []
        raise AssertionError("unreachable")

    def _trial(self, url: str, base, current: dict[str, dict], settings: dict[str, Any], texts, counts) -> Trial:
        before = next((t for t in self._measured if t.settings == settings), None)
        if before is not None:   # measured on the server that exited: its figures stand, nothing is loaded
            self._measured.remove(before)
            self.trials.append(before)
            return before
        t0 = time.time()
        cfgs = self._configs_for(base, settings)
        changed = {m for m in cfgs if cfgs[m] != current.get(m)}
        self._load(url, {m: cfgs[m] for m in changed})
        current.update({m: cfgs[m] for m in changed})
        results, bands = self._measure(url, texts, counts)
        trial = Trial(dict(settings), results, round(time.time() - t0, 1), bands)
        self.trials.append(trial)
        res = ", ".join(f"c{c}: {r['req_per_s']:.0f} req/s p99 {r['p99_ms']:.0f} ms" for c, r in sorted(trial.results.items()))
        if bands:
            res += " (" + "; ".join(f"{x} p99 " + "/".join(f"{r['p99_ms']:.0f}" for _, r in sorted(v.items()))
                                    for x, v in bands.items()) + " ms)"
        ok = "[ok]" if trial.feasible(self.spec.slo_p99_ms) else "[x] "
        self.log(f"{ok} trial {len(self.trials)} ({trial.seconds:.0f} s) {fmt_settings(settings)}: {res}")
        return trial

    def _better(self, a: Trial, b: Trial | None) -> bool:
        """Is a better than b under the SLO?"""
        slo = self.spec.slo_p99_ms
        if b is None:
            return True
        if a.feasible(slo) != b.feasible(slo):
            return a.feasible(slo)
        if not a.feasible(slo):
            return a.p99() < b.p99()
        if abs(a.throughput() - b.throughput()) <= 0.02 * max(a.throughput(), b.throughput()):
            return a.p50() < b.p50()
        return a.throughput() > b.throughput()

    def _search(self, url: str, texts, counts, deadline: float):
        base = model_configs(url, {m for k in self.knobs for m in k.models})
        self._load(url, {self.manifest.name: base[self.manifest.name]})  # explicit model control, or a clear error
        current = copy.deepcopy(base)
        settings = baseline(self.knobs, self.manifest, base)
        best = self._trial(url, base, current, settings, texts, counts)
        trial_s = best.seconds
        if time.time() + trial_s > deadline:
            self.log(f"the budget allows only the baseline trial ({trial_s:.0f} s per trial)")
        improved = True
        while improved and time.time() + trial_s <= deadline:
            improved = False
            for k in self.knobs:
                for v in k.values:
                    if v == best.settings[k.name]:
                        continue
                    if time.time() + trial_s > deadline:
                        break
                    settings = {**best.settings, k.name: v}
                    if any(t.settings == settings for t in self.trials):  # measured in an earlier round: not again
                        continue
                    cand = self._trial(url, base, current, settings, texts, counts)
                    if self._better(cand, best):
                        best, improved = cand, True
        if not best.feasible(self.spec.slo_p99_ms):
            lowest = min(t.p99() for t in self.trials)
            raise TuneError(f"no trial met the SLO {slo_text(self.spec.slo_p99_ms)} at concurrency "
                            f"{','.join(map(str, self.spec.concurrency))}; the best p99 found was {lowest:.1f} ms "
                            f"({len(self.trials)} trials)", "raise --slo-p99-ms, lower --concurrency, or add hardware")
        return best, self._configs_for(base, best.settings)


def slo_text(slo: float | dict[int, float]) -> str:
    if isinstance(slo, dict):
        return "p99 <= " + ", ".join(f"{ms:g} ms at <={b} tokens" for b, ms in sorted(slo.items()))
    return f"p99 <= {slo:g} ms"


def _below(slo: float | dict[int, float], t: Trial) -> float:
    """How far under the SLO the trial's worst p99 is (per band: the tightest band)."""
    if isinstance(slo, dict):
        return min(ms - max(r["p99_ms"] for r in t.bands[f"<={b}"].values()) for b, ms in slo.items())
    return slo - t.p99()


def pareto(trials: list[Trial]) -> list[int]:
    """Indices of trials no other trial beats on throughput (higher), p99 and p50 (lower) at once: the
    three figures the objective weighs (throughput within 2% counts as a tie, decided by p50)."""
    def key(t: Trial) -> tuple[float, float, float]:
        return t.throughput(), -t.p99(), -t.p50()

    out = []
    for i, t in enumerate(trials):
        kt = key(t)
        if not any(all(a >= b for a, b in zip(key(o), kt)) and key(o) != kt for o in trials):
            out.append(i)
    return out


def report(spec: TuneSpec, trials: list[Trial], winner: Trial | None) -> dict:
    """The tune report; `winner` None when no trial met the SLO (what was tried is reported all the same)."""
    baseline = trials[0]
    return {
        "slo_p99_ms": ({f"<={b}": ms for b, ms in spec.slo_p99_ms.items()} if isinstance(spec.slo_p99_ms, dict)
                       else spec.slo_p99_ms), "slo": slo_text(spec.slo_p99_ms),
        "concurrency": list(spec.concurrency), "budget_min": spec.budget_min,
        "scenario": f"mixed-length real texts, {spec.requests} requests per concurrency after {spec.warmup} warm-up",
        "machine": {**machine(), "host": platform.node(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "trials": [{"settings": {k: list(v) if isinstance(v, tuple) else v for k, v in t.settings.items()},
                    "results": {str(c): r for c, r in t.results.items()}, "seconds": t.seconds,
                    "bands": {x: {str(c): r for c, r in v.items()} for x, v in t.bands.items()},
                    "feasible": t.feasible(spec.slo_p99_ms)} for t in trials],
        "pareto": pareto(trials),
        "winner": None if winner is None else trials.index(winner),
        "margin": None if winner is None else {
            "p99_ms_below_slo": round(_below(spec.slo_p99_ms, winner), 2),
            "throughput_vs_baseline": round(winner.throughput() / max(baseline.throughput(), 1e-9), 3)},
    }


def apply(spec: TuneSpec, configs: dict[str, dict], doc: dict, log: Log = print) -> Path:
    """Write the winner as a repository (a copy, or in place with force), checked with embtrt check."""
    from google.protobuf import json_format, text_format
    from ..repository.proto import model_config_pb2 as mc

    from ..repository.check import check_repository

    src, dst = Path(spec.repository).resolve(), Path(spec.apply_to).resolve()  # type: ignore[arg-type]
    if dst.exists() and dst != src and not spec.force:
        raise SpecError(f"invalid apply_to: {dst} exists", "pass --force to replace it")
    tmp = dst.with_name(f".{dst.name}.tune-{int(time.time())}")
    shutil.copytree(src, tmp, copy_function=shutil.copy2)
    mach = doc.get("machine", {})
    where = (f"{mach.get('host', '?')} ({mach.get('cpu', '?')}, {mach.get('cpus', '?')} CPUs), {mach.get('date', '?')}; "
             "settings measured by throughput on that host")
    for name, cfg in configs.items():
        msg = json_format.ParseDict(cfg, mc.ModelConfig(), ignore_unknown_fields=True)
        path = tmp / name / "config.pbtxt"
        path.write_text(f"# Tuned by embtrt tune (SLO {slo_text(spec.slo_p99_ms)}) on {where}.\n"
                        + text_format.MessageToString(msg))
    man = read_manifest(tmp)
    budget = doc["trials"][doc["winner"]]["settings"].get(BUDGET)
    if budget is not None and budget != man.max_batch_tokens:  # the record follows the configs (embtrt check)
        man = manifest_with_budget(man, int(budget))
    write_manifest(tmp, man.with_extra(tuning=doc))
    rep = check_repository(tmp, allow_pending_plans=True)
    if not rep.passed:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TuneError("the tuned repository fails embtrt check: " + "; ".join(rep.failures()))
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{int(time.time())}")
        dst.rename(old)
        tmp.rename(dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(dst)
    log(f"tuned repository written to {dst} (embtrt check passed)")
    return dst


def tune(spec: TuneSpec, log: Log = print) -> dict:
    from ..common.backend import backend_lib
    from ..common.corpus import load_corpus

    texts = load_corpus(spec.corpus)
    tuner = Tuner(spec, log)
    # token counts from the repository's own tokenizer (no reference model, no PyTorch needed)
    text_mod, _ = backend_lib()
    m = tuner.manifest
    tok = text_mod.TextTokenizer(str(Path(spec.repository) / m.name / "1" / "tokenizer.json"), 1 << 20, m.pad_id)
    counts = tok.encode(texts).lengths
    try:
        winner, configs = tuner.run(texts, counts)
    except TuneError:
        if spec.out is not None and tuner.trials:  # what was tried is most useful exactly when nothing met the SLO
            for p in write_tune(report(spec, tuner.trials, None), Path(spec.out)):
                log(f"wrote {p} (no trial met the SLO)")
        raise
    doc = report(spec, tuner.trials, winner)
    log(f"winner: trial {doc['winner'] + 1}: {fmt_settings(winner.settings)} - {winner.throughput():.1f} req/s at "
        f"concurrency {max(spec.concurrency)}, worst p99 {winner.p99():.1f} ms (SLO {slo_text(spec.slo_p99_ms)}), "
        f"{doc['margin']['throughput_vs_baseline']}x the baseline")
    if spec.out is not None:
        for p in write_tune(doc, Path(spec.out)):
            log(f"wrote {p}")
    if spec.apply_to is not None:
        apply(spec, configs, doc, log)
    return {**doc, "settings": winner.settings}
