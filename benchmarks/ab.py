"""A/B benchmark of the serving hot path: the working tree against a named commit, interleaved.

    python benchmarks/ab.py BASE [BASE2 ...] [--rounds 3] [--requests 1000] [--out DIR]    (or: make bench-ab BASE=...)

1. `git archive BASE` is unpacked into a scratch folder; the default model (the bundled
   all-MiniLM-L6-v2) is built with the same `embtrt build` options by each BASE's code (this venv,
   BASE's `builder/` first on PYTHONPATH, BASE's own console-script entry point) and by the
   working tree's.
2. Each round serves one repository at a time (never both at once) with the working tree's
   `embtrt serve` (the same tritonserver and launcher for both sides: only the repositories
   differ), waits for a real inference, runs `embtrt bench` (one load driver for every benchmark)
   at concurrency 1 and 32 on short (<=32 tokens) and mixed texts, one text per request over gRPC
   to the front door, and stops the server. The side that goes first rotates between rounds.
3. Prints per-round req/s and p50, the medians per side and the ratio HEAD / BASE for each base,
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
SCENARIOS = ("<=32", "mixed")


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
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree / "builder") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def build(tree: Path, out: Path, extra: list[str], log: Path) -> None:
    cmd = [*embtrt_cmd(tree), "build", "--out", str(out), *extra]
    with log.open("w") as f:
        r = subprocess.run(cmd, env=tree_env(tree), stdout=f, stderr=subprocess.STDOUT, cwd=tree)
    if r.returncode != 0:
        sys.exit(f"ab: the build by {tree} failed (exit {r.returncode}); see {log}")


def pinned_overhead(options: list[str]) -> int | None:
    """--run-overhead-tokens given as a build option, if any."""
    for o in options:
        if o.startswith("--run-overhead-tokens="):
            return int(o.split("=", 1)[1])
    return None


def built_overhead(repo: Path) -> int:
    """The run overhead a build measured (front door parameter run_overhead_tokens). Each build
    times its encoder and the fit moves with the machine's load (35 and 71 tokens for the same
    model minutes apart), which moved the front door's throughput by more than the code did: the
    A/B builds every side with HEAD's figure, so that only the code differs."""
    text = (repo / NAME / "config.pbtxt").read_text()
    m = re.search(r'key: "run_overhead_tokens"\s*value: \{ string_value: "(\d+)" \}', text)
    if not m:
        sys.exit(f"ab: no run_overhead_tokens in {repo}'s front door config")
    return int(m.group(1))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """`embtrt serve REPO` (the working tree's) in its own process group, stopped on exit."""

    def __init__(self, repo: Path, log: Path) -> None:
        self.grpc = free_port()
        ports = ["--grpc-port", str(self.grpc), "--http-port", str(free_port()), "--metrics-port", str(free_port()), "--health-port", "0"]
        self.log = log.open("w")
        self.proc = subprocess.Popen([str(BIN / "embtrt"), "serve", str(repo), *ports, "--probe-interval", "0"],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def __enter__(self) -> "Served":
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"ab: embtrt serve exited with {self.proc.returncode}; see {self.log.name}")
            r = subprocess.run([str(BIN / "embtrt"), "probe", "--url", f"127.0.0.1:{self.grpc}", "--model", NAME],
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


def measure(grpc: int, requests: int, warmup: int) -> dict[tuple[str, int], dict]:
    """One side's round: `embtrt bench` at concurrency 1 and 32 on short and mixed texts."""
    cmd = [str(BIN / "embtrt"), "bench", "--model", f"{NAME}@127.0.0.1:{grpc}", "--no-inprocess",
           "--concurrency", "1,32", "--requests", str(requests), "--warmup", str(warmup),
           "--only", ",".join(SCENARIOS), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ab: embtrt bench failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    doc = json.loads(r.stdout)
    out = {}
    for row in doc["results"]:
        if row["errors"]:
            sys.exit(f"ab: {row['errors']} errors in {row['bucket']} at concurrency {row['concurrency']}: "
                     f"{row['error_samples'][:2]}")
        out[(row["bucket"], row["concurrency"])] = {"req_per_s": row["req_per_s"], "p50_ms": row["p50_ms"],
                                                    "p99_ms": row["p99_ms"]}
    return out


def report(doc: dict) -> str:
    sides = doc["sides"]
    names = list(sides)
    lines = [f"A/B: HEAD (the working tree) against {', '.join(f'{b} ({c[:10]})' for b, c in doc['bases'].items())}",
             f"cpu: {doc['cpu']}; {doc['rounds']} rounds, {doc['requests']} requests per scenario and round",
             f"command: {doc['command']}", ""]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", nargs="+", help="commit(s) to compare the working tree against (hash, tag, branch)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per side; the order of the sides rotates. Default 3.")
    ap.add_argument("--requests", type=int, default=1000, help="measured requests per scenario and round. Default 1000.")
    ap.add_argument("--warmup", type=int, default=50, help="warm-up requests per scenario and round. Default 50.")
    ap.add_argument("--build-option", action="append", default=[],
                    help="extra `embtrt build` option for every side, e.g. --build-option=--max-queue-delay-us=0")
    ap.add_argument("--out", type=Path, default=None, help="folder for ab.json and ab.md. Default: print only.")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="embtrt-ab-"))
    try:
        trees: dict[str, Path] = {}
        bases: dict[str, str] = {}
        for b in args.base:
            trees[b] = work / f"tree-{len(trees)}"
            bases[b] = unpack(b, trees[b])
        trees["head"] = ROOT
        repos = {side: work / f"repo-{i}" for i, side in enumerate(trees)}
        overhead = pinned_overhead(args.build_option)
        for side in ["head", *bases]:  # HEAD first: its measured run overhead is pinned for the bases
            tree = trees[side]
            extra = list(args.build_option)
            if overhead is not None and not any(o.startswith("--run-overhead-tokens") for o in extra):
                extra.append(f"--run-overhead-tokens={overhead}")
            print(f"== building the default model with {side}'s code {' '.join(extra)}", flush=True)
            build(tree, repos[side], extra, work / f"build-{side}.log")
            if overhead is None:
                overhead = built_overhead(repos[side])
                print(f"   run overhead {overhead} tokens, measured by HEAD's build: pinned for every base", flush=True)
        order = list(trees)
        sides: dict[str, list] = {side: [] for side in order}
        for r in range(args.rounds):
            for side in order[r % len(order):] + order[:r % len(order)]:  # who goes first rotates
                with Served(repos[side], work / f"serve-{r}.log") as s:
                    got = measure(s.grpc, args.requests, args.warmup)
                sides[side].append({f"{b}@{c}": v for (b, c), v in got.items()})
                print(f"round {r + 1} {side}: " + ", ".join(f"{k} {v['req_per_s']:.1f} req/s"
                                                           for k, v in sides[side][-1].items()), flush=True)
        doc = {"bases": bases, "cpu": cpu_name(), "rounds": args.rounds,
               "requests": args.requests, "warmup": args.warmup, "build_options": args.build_option,
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "command": " ".join(["python benchmarks/ab.py", *args.base, f"--rounds {args.rounds}",
                                    f"--requests {args.requests}", *[f"--build-option={o}" for o in args.build_option]]),
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
