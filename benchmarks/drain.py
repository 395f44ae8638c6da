"""SIGTERM of `embtrt serve` while clients send without pause: what each request got, measured.

    .venv/bin/python benchmarks/drain.py [--repo REPO] [--clients 8] [--grace 5] [--runs 1] [--out DIR]

Builds the default model (unless --repo is given), serves it with `embtrt serve --drain-grace GRACE`,
starts CLIENTS plain tritonclient gRPC clients (no retries: each failure is counted as the client
saw it) that send one short text per request to the front door without pause, sends SIGTERM after
5 s, and counts the answers by status and by phase: sent before the signal, during the grace,
after it until the server exited, after the exit. Prints a table and writes drain.json. Loopback
only; each run is bounded (the server must exit within 60 s).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from serve_run import BIN, start_serve

from embtrt.serve.wire import text_input

NAME = "all_minilm_l6_v2"
TEXTS = [f"query {i}: how do I keep a retrieval service up during a rolling update" for i in range(64)]


def kind(status: str, message: str) -> str:
    if status == "OK":
        return "OK"
    if "draining" in message:
        return "UNAVAILABLE (draining: refused by the front door)"
    if "failed to connect" in message or "Connection refused" in message:
        return "UNAVAILABLE (connection refused: exited)"
    if "Socket closed" in message or "Stream removed" in message:
        return "UNAVAILABLE (cut off in flight)"
    return f"{status}: {message[:80]}"


def run_once(repo: Path, work: Path, clients: int, grace: float) -> dict:
    serve, url, log = start_serve(repo, work, "--drain-grace", str(grace))
    stop, lock = threading.Event(), threading.Lock()
    done: list[tuple[str, float, str]] = []
    try:
        def send(k: int) -> None:
            c, i = grpcclient.InferenceServerClient(url), k
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    c.infer(NAME, [text_input([TEXTS[i % len(TEXTS)]])], client_timeout=30).as_numpy("EMBEDDING")
                    got = ("OK", t0, "")
                except InferenceServerException as exc:
                    got = (str(exc.status()).removeprefix("StatusCode."), t0, str(exc))
                    time.sleep(0.01)
                with lock:
                    done.append(got)
                i += 1
            c.close()

        threads = [threading.Thread(target=send, args=(k,), daemon=True) for k in range(clients)]
        for t in threads:
            t.start()
        time.sleep(5)
        t_sig = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        code = serve.wait(timeout=60)
        t_exit = time.monotonic()
        time.sleep(1)
        stop.set()
        for t in threads:
            t.join(60)
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
    phases: dict[str, collections.Counter] = {p: collections.Counter() for p in
                                              ("before the signal", "grace", "after the grace", "after the exit")}
    for status, t0, msg in done:
        p = ("before the signal" if t0 < t_sig else "grace" if t0 < t_sig + grace
             else "after the grace" if t0 < t_exit else "after the exit")
        phases[p][kind(status, msg)] += 1
    text = log.read_text()
    return {"exit_code": code, "exit_s": round(t_exit - t_sig, 2), "requests": len(done),
            "not_found": sum(1 for s, _, _ in done if s == "NOT_FOUND"),
            "phases": {p: dict(c) for p, c in phases.items()},
            "stopped_at_once": "stopped at once" in text}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", type=Path, default=None)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--grace", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="embtrt-drain-"))
    repo = args.repo
    if repo is None:
        repo = work / "repo"
        subprocess.run([str(BIN / "embtrt"), "build", "--out", str(repo)], check=True, stdout=subprocess.DEVNULL)
    doc = {"cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "),
           "cores": os.cpu_count(), "clients": args.clients, "grace_s": args.grace,
           "command": " ".join(["benchmarks/drain.py", *sys.argv[1:]]),
           "runs": [run_once(repo, work, args.clients, args.grace) for _ in range(args.runs)]}
    for i, r in enumerate(doc["runs"]):
        print(f"run {i + 1}: exit {r['exit_code']} after {r['exit_s']} s, {r['requests']} requests, "
              f"NOT_FOUND {r['not_found']}")
        for p, c in r["phases"].items():
            print(f"  {p:18s} " + ", ".join(f"{k}: {v}" for k, v in sorted(c.items())))
    print(json.dumps({"not_found_total": int(np.sum([r["not_found"] for r in doc["runs"]]))}))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "drain.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
