"""A/B benchmark of the serving hot path: the working tree against named commits, interleaved.

    python benchmarks/ab.py BASE [BASE2 ...] [--mode own|pinned] [--rounds 3] [--requests 1000] [--out DIR]
    (or: make bench-ab BASE=... [MODE=pinned])

1. `git archive BASE` is unpacked into a scratch folder; the default model (the bundled
   all-MiniLM-L6-v2) is built by each BASE's code (this venv, BASE's `builder/` first on
   PYTHONPATH, BASE's own console-script entry point) and by the working tree's.
   Two modes:
   - `own` (default): each side's own default build, what a user of that commit gets
     (`--base-build-option` adds options to the bases only, e.g. a base's best known value);
   - `pinned`: the code only: the bases are built with HEAD's chunking parameter
     (`run_overhead_tokens` as HEAD's build wrote it), so only the code differs.
   `--variant LABEL=OPTION[,OPTION]` adds sides built by the working tree with other options
   (a sweep of one build parameter, served the same way). Each side's chunking parameters are
   printed.
2. Each round serves one repository at a time (never both at once) with the working tree's
   `embtrt serve` (the same tritonserver and launcher for every side: only the repositories
   differ), waits for a real inference, runs `embtrt bench` (one load driver for every benchmark)
   at concurrency 1 and 32, one text per request over gRPC to the front door, on three
   scenarios: the bundled corpus's short (<=32 tokens) and mixed texts, and 1,000 real short
   texts (`debian-short`: Debian package descriptions of 9-29 tokens,
   benchmarks/data/debian-short-descriptions.txt, provenance in benchmarks/make_short_texts.py);
   then stops the server. The side that goes first rotates between rounds.
3. Prints per-round req/s and p50, the medians per side and the ratio HEAD / other side for each,
   with the CPU named, and writes ab.json and ab.md under --out.

Only the project's own files and this venv are used; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NAME = "all_minilm_l6_v2"
SCENARIOS = ("<=32", "mixed", "debian-short")
SHORT_TEXTS = ROOT / "benchmarks" / "data" / "debian-short-descriptions.txt"
CHUNKING = ("run_overhead_tokens", "max_batch_tokens", "encoder_max_batch_sizes", "pad_to_bucket")


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def unpack(commit: str, dest: Path) -> str:
    """BASE's files (as committed) into dest -> the full commit id."""
    full = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{commit}^{{commit}}"],
                          check=True, capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", full], check=True,
                             capture_output=True).stdout
    dest.mkdir(parents=True)
    import io

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return full


def embtrt_cmd(tree: Path) -> list[str]:
    """The tree's own `embtrt` entry point (it moved between commits), run by this venv's Python."""
    scripts = tomllib.loads((tree / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, func = scripts["embtrt"].partition(":")
    return [sys.executable, "-c", f"import sys; from {module} import {func} as f; sys.exit(f())"]


def tree_env(tree: Path) -> dict[str, str]:
    """The tree's own builder and serving package first: a base builds with its embtrt_backend, not HEAD's
    (whose modules and kind registry may have moved since)."""
    env = dict(os.environ)
    own = os.pathsep.join(str(tree / d) for d in ("builder", "python_backend"))
    env["PYTHONPATH"] = own + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def build(tree: Path, out: Path, extra: list[str], log: Path) -> None:
    cmd = [*embtrt_cmd(tree), "build", "--out", str(out), *extra]
    with log.open("w") as f:
        r = subprocess.run(cmd, env=tree_env(tree), stdout=f, stderr=subprocess.STDOUT, cwd=tree)
    if r.returncode != 0:
        sys.exit(f"ab: the build by {tree} failed (exit {r.returncode}); see {log}")


def chunking(repo: Path) -> dict[str, str]:
    """The front door's chunking parameters as a side's build wrote them."""
    text = (repo / NAME / "config.pbtxt").read_text()
    out = {}
    for key in CHUNKING:
        m = re.search(rf'key: "{key}"\s*value: \{{ string_value: "([^"]*)" \}}', text)
        out[key] = m.group(1) if m else "(absent: the front door's fallback)"
    return out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """`embtrt serve REPO` (the working tree's) in its own process group, stopped on exit."""

    def __init__(self, repo: Path, log: Path, model: str = NAME) -> None:
        self.grpc, self.http, self.metrics, self.model = free_port(), free_port(), free_port(), model
        ports = ["--grpc-port", str(self.grpc), "--http-port", str(self.http), "--metrics-port", str(self.metrics),
                 "--health-port", "0"]
        self.log = log.open("w")
        self.proc = subprocess.Popen([str(BIN / "embtrt"), "serve", str(repo), *ports, "--probe-interval", "0"],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def __enter__(self) -> "Served":
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"ab: embtrt serve exited with {self.proc.returncode}; see {self.log.name}")
            r = subprocess.run([str(BIN / "embtrt"), "probe", "--url", f"127.0.0.1:{self.grpc}", "--model", self.model],
                               capture_output=True)
            if r.returncode == 0:
                return self
            time.sleep(1)
        self.__exit__()
        sys.exit(f"ab: the server did not become ready in 300 s; see {self.log.name}")

    def __exit__(self, *exc: object) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.log.close()


def _bench(grpc: int, requests: int, warmup: int, extra: list[str]) -> list[dict]:
    cmd = [str(BIN / "embtrt"), "bench", "--model", f"{NAME}@127.0.0.1:{grpc}", "--no-inprocess",
           "--concurrency", "1,32", "--requests", str(requests), "--warmup", str(warmup), "--json", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ab: embtrt bench failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)["results"]


def measure(grpc: int, requests: int, warmup: int) -> dict[tuple[str, int], dict]:
    """One side's round: `embtrt bench` at concurrency 1 and 32 on each scenario."""
    rows = [*_bench(grpc, requests, warmup, ["--only", "<=32,mixed"]),
            *[{**r, "bucket": "debian-short"} for r in
              _bench(grpc, requests, warmup, ["--corpus", str(SHORT_TEXTS), "--only", "mixed"])]]
    out = {}
    for row in rows:
        if row["errors"]:
            sys.exit(f"ab: {row['errors']} errors in {row['bucket']} at concurrency {row['concurrency']}: "
                     f"{row['error_samples'][:2]}")
        out[(row["bucket"], row["concurrency"])] = {"req_per_s": row["req_per_s"], "p50_ms": row["p50_ms"],
                                                    "p99_ms": row["p99_ms"]}
    return out


def report(doc: dict) -> str:
    sides = doc["sides"]
    names = list(sides)
    lines = [f"A/B: HEAD (the working tree) against {', '.join(f'{b} ({c[:10]})' for b, c in doc['bases'].items())}"
             + (f" and variants {', '.join(doc['variants'])}" if doc.get("variants") else ""),
             f"cpu: {doc['cpu']}; {doc['rounds']} rounds, {doc['requests']} requests per scenario and round; "
             f"mode {doc.get('mode', 'pinned')}",
             f"command: {doc['command']}", ""]
    for side, ch in doc.get("chunking", {}).items():
        lines.append(f"chunking of {side}'s build: " + ", ".join(f"{k} {v}" for k, v in ch.items()))
    lines.append("")
    lines.append("| scenario | conc | side | req/s per round | median req/s | median p50 ms |")
    lines.append("|---|---|---|---|---|---|")
    summary = []
    for scen in SCENARIOS:
        for conc in (1, 32):
            key = f"{scen}@{conc}"
            med = {}
            for side in names:
                rows = [r[key] for r in sides[side]]
                med[side] = statistics.median(r["req_per_s"] for r in rows)
                p50 = statistics.median(r["p50_ms"] for r in rows)
                lines.append(f"| {scen} | {conc} | {side} | {', '.join(format(r['req_per_s'], '.1f') for r in rows)} | "
                             f"{med[side]:.1f} | {p50:.2f} |")
            summary += [f"{scen:>6} conc {conc:>2}: HEAD/{b} median req/s = {med['head'] / med[b]:.3f}"
                        for b in names if b != "head"]
    return "\n".join(lines + [""] + summary) + "\n"


def parse_variant(text: str) -> tuple[str, list[str]]:
    label, sep, opts = text.partition("=")
    if not sep or not label or label in ("head",):
        sys.exit(f"ab: invalid --variant {text!r}: LABEL=OPTION[,OPTION], e.g. rot4=--run-overhead-tokens=4")
    return label, [o for o in opts.split(",") if o]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", nargs="*", help="commit(s) to compare the working tree against (hash, tag, branch)")
    ap.add_argument("--mode", choices=("own", "pinned"), default="own",
                    help="own: each side's own default build (what users get); pinned: the bases take HEAD's "
                         "run_overhead_tokens (the code only). Default own.")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per side; the order of the sides rotates. Default 3.")
    ap.add_argument("--requests", type=int, default=1000, help="measured requests per scenario and round. Default 1000.")
    ap.add_argument("--warmup", type=int, default=50, help="warm-up requests per scenario and round. Default 50.")
    ap.add_argument("--build-option", action="append", default=[],
                    help="extra `embtrt build` option for every side, e.g. --build-option=--max-queue-delay-us=0")
    ap.add_argument("--base-build-option", action="append", default=[],
                    help="extra `embtrt build` option for the bases only, e.g. --base-build-option=--run-overhead-tokens=7")
    ap.add_argument("--variant", action="append", default=[], type=parse_variant,
                    help="LABEL=OPTION[,OPTION]: one more side, built by the working tree with these options. Repeatable.")
    ap.add_argument("--out", type=Path, default=None, help="folder for ab.json and ab.md. Default: print only.")
    args = ap.parse_args()
    if not args.base and not args.variant:
        ap.error("give at least one BASE or --variant")
    if args.mode == "pinned" and any(o.startswith("--run-overhead-tokens") for o in args.base_build_option):
        ap.error("--mode pinned gives the bases HEAD's run overhead: a --base-build-option=--run-overhead-tokens "
                 "contradicts it (use --mode own)")
    work = Path(tempfile.mkdtemp(prefix="embtrt-ab-"))
    try:
        trees: dict[str, Path] = {"head": ROOT}
        options: dict[str, list[str]] = {"head": list(args.build_option)}
        bases: dict[str, str] = {}
        for b in args.base:
            trees[b] = work / f"tree-{len(trees)}"
            bases[b] = unpack(b, trees[b])
            options[b] = [*args.build_option, *args.base_build_option]
        for label, opts in args.variant:
            trees[label], options[label] = ROOT, [*args.build_option, *opts]
        repos = {side: work / f"repo-{i}" for i, side in enumerate(trees)}
        chunks: dict[str, dict[str, str]] = {}
        for side in trees:  # HEAD first: in pinned mode its run overhead is pinned for the bases
            extra = list(options[side])
            if args.mode == "pinned" and side in bases and not any(o.startswith("--run-overhead-tokens") for o in extra):
                extra.append(f"--run-overhead-tokens={chunks['head']['run_overhead_tokens']}")
            print(f"== building the default model with {side}'s code {' '.join(extra)}", flush=True)
            build(trees[side], repos[side], extra, work / f"build-{side}.log")
            chunks[side] = chunking(repos[side])
            print("   chunking: " + ", ".join(f"{k} {v}" for k, v in chunks[side].items()), flush=True)
        order = list(trees)
        sides: dict[str, list] = {side: [] for side in order}
        for r in range(args.rounds):
            for side in order[r % len(order):] + order[:r % len(order)]:  # who goes first rotates
                with Served(repos[side], work / f"serve-{r}.log") as s:
                    got = measure(s.grpc, args.requests, args.warmup)
                sides[side].append({f"{b}@{c}": v for (b, c), v in got.items()})
                print(f"round {r + 1} {side}: " + ", ".join(f"{k} {v['req_per_s']:.1f} req/s"
                                                           for k, v in sides[side][-1].items()), flush=True)
        doc = {"bases": bases, "variants": {label: opts for label, opts in args.variant}, "mode": args.mode,
               "cpu": cpu_name(), "rounds": args.rounds,
               "requests": args.requests, "warmup": args.warmup, "build_options": args.build_option,
               "base_build_options": args.base_build_option, "chunking": chunks,
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "command": " ".join(["python benchmarks/ab.py", *args.base, f"--mode {args.mode}", f"--rounds {args.rounds}",
                                    f"--requests {args.requests}", *[f"--build-option={o}" for o in args.build_option],
                                    *[f"--base-build-option={o}" for o in args.base_build_option],
                                    *[f"--variant {label}={','.join(opts)}" for label, opts in args.variant]]),
               "sides": sides}
        text = report(doc)
        print(text)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "ab.json").write_text(json.dumps(doc, indent=2) + "\n")
            (args.out / "ab.md").write_text(text)
    finally:
        subprocess.run(["rm", "-rf", str(work)])


if __name__ == "__main__":
    main()
