"""The embedder's side of `embtrt verify` and `embtrt bench` (Kind.verify_cli, Kind.bench_cli): its cosine gate
per length bucket, and the embedding scenarios (Triton, OpenAI-compatible and in-process targets per bucket and
concurrency, the floor). cli/measure.py reads the command line into VerifyOptions / BenchOptions."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from ...cli.app import err, out
from ...cli.measure_kinds import BenchOptions, VerifyOptions
from ...common.options import parse_int_list
from ...errors import SpecError, require_extra
from ...reference.verdict import Verdict


def verify(o: VerifyOptions, log) -> Verdict:
    """The embedder's gate: served vectors against the reference model (or a second deployment, --against),
    whose thresholds are verify's own options."""
    from ...common.corpus import load_corpus
    from ...reference.modelinfo import default_model_path
    from ...reference.torch_ref import Reference
    from ...repository.gate import Gate
    from .measure import require_bundled, verify as run_verify, verify_against

    gate = Gate(o.cosine_p50, o.cosine_p01, o.top10_overlap, o.recall_regression)
    if o.against is not None:
        require_extra("build", "verify --against", "transformers")
        other_url, _, other_model = o.against.partition("/")
        if o.reference is None:   # its tokenizer counts the tokens that decide the buckets
            require_bundled(o.url, o.model)
        texts = load_corpus(o.corpus)
        counts = Reference(o.reference or default_model_path(), trust_remote_code=o.trust_remote_code).token_counts(texts)
        return verify_against(o.url, o.model, other_url, other_model or o.model, texts, gate, counts, log=log)
    require_extra("build", "verify", "torch", "transformers", "sentence_transformers")
    if o.reference is None:
        require_bundled(o.url, o.model)
    ref = Reference(o.reference or default_model_path(), pooling=o.ref_pooling, trust_remote_code=o.trust_remote_code)
    idx = None
    if o.index_identity is not None:
        doc = json.loads(o.index_identity.read_text())
        idx = doc.get("identity", doc)
    return run_verify(o.url, o.model, ref, load_corpus(o.corpus), gate, under_load=o.under_load,
                      concurrency=o.concurrency, load_cosine=o.load_cosine, index_identity=idx,
                      prompt_name=o.prompt_name, dimensions=o.dimensions, log=log)


def bench(o: BenchOptions) -> None:
    """The embedding scenarios: every target on the same texts per length bucket and concurrency."""
    from urllib.parse import parse_qsl

    from ...cli.measure import parse_options
    from ...common.corpus import load_corpus
    from ...reference.modelinfo import default_model_path
    from ...reference.torch_ref import Reference
    from .measure_bench import Target, plots_unavailable

    require_extra("build", "bench", "transformers", *(("sentence_transformers",) if o.inprocess else ()))
    models, pids, opts = o.models, o.triton_pid, dict(o.options)
    if len(pids) > 1 and len(pids) != len(models):
        raise SpecError("invalid --triton-pid: give one for all --model targets or one per --model")
    targets = []
    for i, m in enumerate(models):
        spec, _, query = m.partition("?")  # NAME[@HOST:PORT][?key=value&...]: this target's own options
        name, _, murl = spec.partition("@")
        tp = (pids[i] if len(pids) > 1 else pids[0],) if pids else ()
        own = {**opts, **parse_options([f"{k}={v}" for k, v in parse_qsl(query)])} if query else opts
        targets.append(Target(f"triton:{m}" if murl or query else f"triton:{name}", "triton", murl or o.url, name, tp, own,
                              processes=o.processes))
    ou, om, opid = o.openai_url, o.openai_model, o.openai_pid
    if len(ou) != len(om) or (opid and len(opid) != len(ou)):
        raise SpecError("invalid openai targets: give one --openai-model (and --openai-pid, if any) per --openai-url")
    targets += [Target(f"openai:{m}@{u}", "openai", u, m, (opid[i],) if opid else (), opts) for i, (u, m) in enumerate(zip(ou, om))]
    no_plots = plots_unavailable() if o.out_dir is not None else None
    if no_plots:  # said before the run, not after it
        err.print(f"warning: {no_plots}; results.json and results.md will be written, the plots skipped", markup=False)
    ref_dir = o.reference or default_model_path()
    texts = load_corpus(o.corpus)
    counts = Reference(ref_dir, trust_remote_code=o.trust_remote_code).token_counts(texts)
    if o.processes < 1:
        raise SpecError(f"invalid --processes {o.processes}: 1 or more")
    with contextlib.ExitStack() as stack:
        if o.floor:
            targets.append(stack.enter_context(_floor_target(o.processes, _width(targets))))
        _bench_run(o, targets, texts, counts, ref_dir, no_plots)


def _width(targets) -> int:
    """The first Triton target's vector width (its config's embtrt.dim), for a floor that answers as many bytes."""
    import tritonclient.grpc as grpcclient

    for t in targets:
        if t.kind == "triton":
            c = grpcclient.InferenceServerClient(t.url)
            try:
                return int(c.get_model_config(t.model).config.parameters["embtrt.dim"].string_value)
            except Exception as exc:  # noqa: BLE001 (said with what it needs)
                raise SpecError(f"--floor: cannot read {t.model}'s width from {t.url} ({exc})",
                                "the floor answers vectors of the first --model's width: serve it first") from None
            finally:
                c.close()
    raise SpecError("--floor needs a --model (Triton) target to compare with")


@contextlib.contextmanager
def _floor_target(processes: int, dim: int):
    """The floor on a tritonserver of its own (stopped after the run), as a bench target."""
    import tempfile

    from ...measure.floor import FLOOR_MODEL, FLOOR_TARGET, write_floor
    from ...serve.server import ServerSpec, TritonServer, free_port
    from .measure_bench import Target

    with tempfile.TemporaryDirectory(prefix="embtrt-floor-") as tmp:
        spec = ServerSpec(write_floor(Path(tmp) / "repo", dim=dim), grpc_port=free_port(), http_port=free_port(),
                          metrics_port=free_port(), graceful_exit=False)
        with TritonServer(spec) as server:
            assert server.proc is not None
            yield Target(FLOOR_TARGET, "triton", server.grpc_url, FLOOR_MODEL, (-server.proc.pid,), processes=processes)


def _bench_run(o: BenchOptions, targets, texts, counts, ref_dir, no_plots) -> None:
    from rich.progress import Progress
    from rich.table import Table

    from ...cli.measure import parse_cpu_pids
    from .measure_bench import markdown, run_bench, save

    only = tuple(x for x in o.only.split(",") if x) if o.only else None
    with Progress(console=err if o.as_json else out, transient=True) as prog:
        task = prog.add_task("bench", total=None)
        doc = run_bench(targets, texts, counts, buckets=parse_int_list("buckets", o.buckets) or (32, 128, 256),
                        concurrency=parse_int_list("concurrency", o.concurrency) or (1,), texts_per_request=o.texts_per_request,
                        requests=o.requests, warmup=o.warmup, inprocess_model=ref_dir if o.inprocess else None,
                        ort_repo=o.ort_repo, engine_repos=o.engine_repo, only_buckets=only,
                        progress=lambda m: prog.update(task, description=m), cpu_pids=parse_cpu_pids(list(o.cpu_pid)),
                        rounds=o.rounds, trust_remote_code=o.trust_remote_code)
    if o.out_dir is not None:
        for p in save(doc, o.out_dir, with_plots=no_plots is None):
            err.print(f"wrote {p}", markup=False)
    if o.as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    if not out.is_terminal:  # a file or a pipe: the whole table, never cut to 80 columns
        sys.stdout.write(markdown(doc))
        return
    table = Table(title="embtrt bench")
    for col in ("target", "bucket", "conc", "req/s", "texts/s", "tokens/s", "p50", "p95", "p99", "max", "err"):
        table.add_column(col, justify="left" if col in ("target", "bucket") else "right")
    for r in doc["results"]:
        table.add_row(r["target"], r["bucket"], str(r["concurrency"]), f"{r['req_per_s']:.1f}", f"{r['texts_per_s']:.1f}",
                      f"{r['tokens_per_s']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}", f"{r['p99_ms']:.1f}",
                      f"{r['max_ms']:.1f}", str(r["errors"]))
    out.print(table)
