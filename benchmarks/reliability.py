"""Small requests beside a maximal legal one, and SIGTERM under steady traffic, measured.

    .venv/bin/python benchmarks/reliability.py [--out DIR]

Builds the default model, serves it (`embtrt serve`), starts `embtrt gateway` in front of it, and:
1. sends one maximal legal request under the gateway's default caps (1024 texts of 1,900 characters:
   1,945,600 characters, each cut at 256 tokens) and, while it is in flight, small one-text requests
   one after another: their latencies (p50, max) and the large request's own time;
2. stops `embtrt serve` with SIGTERM while 8 clients send requests without pause: seconds to exit,
   and whether it restarted anything.
Prints a table and writes reliability.json; loopback only, bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
NAME = "all_minilm_l6_v2"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            sys.exit(f"reliability: {what} not within {timeout_s} s")
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="embtrt-rel-"))
    subprocess.run([str(BIN / "embtrt"), "build", "--out", str(work / "repo")], check=True, stdout=subprocess.DEVNULL)
    g, h, m, p = free_port(), free_port(), free_port(), free_port()
    serve = subprocess.Popen([str(BIN / "embtrt"), "serve", str(work / "repo"), "--grpc-port", str(g), "--http-port", str(h),
                              "--metrics-port", str(m), "--health-port", "0"],
                             stdout=(work / "serve.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    gw = subprocess.Popen([str(BIN / "embtrt"), "gateway", str(work / "repo"), "--triton", f"127.0.0.1:{g}", "--port", str(p),
                           "--request-timeout", "600"], stdout=(work / "gw.log").open("w"), stderr=subprocess.STDOUT,
                          start_new_session=True)
    url = f"http://127.0.0.1:{p}/v1/embeddings"
    doc: dict = {"cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "),
                 "cores": os.cpu_count()}
    try:
        wait(lambda: "ready: model" in (work / "serve.log").read_text(), 300, "serve ready")

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{p}/health/ready", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait(up, 120, "gateway ready")
        corpus = json.loads(subprocess.check_output([sys.executable, "-c", "import json; from embtrt.common.corpus import "
                                                     "load_corpus; print(json.dumps(load_corpus()))"]))
        long = " ".join(corpus[:12])[:1900]
        big = {"model": NAME, "input": [f"{i} {long}" for i in range(1024)]}
        result: dict = {}

        def send_big() -> None:
            t0 = time.monotonic()
            r = httpx.post(url, json=big, timeout=600)
            result["big_s"], result["big_status"] = time.monotonic() - t0, r.status_code

        httpx.post(url, json={"model": NAME, "input": "warm up"}, timeout=60)
        t = threading.Thread(target=send_big)
        t.start()
        time.sleep(0.5)  # the large request is in
        lat, codes = [], []
        while t.is_alive() and len(lat) < 200:
            t0 = time.monotonic()
            r = httpx.post(url, json={"model": NAME, "input": f"a short query {len(lat)}"}, timeout=120)
            lat.append(time.monotonic() - t0)
            codes.append(r.status_code)
        t.join()
        doc["beside_large"] = {"large_request_s": round(result["big_s"], 2), "large_status": result["big_status"],
                               "small_requests": len(lat), "small_ok": codes.count(200),
                               "small_p50_ms": round(statistics.median(lat) * 1e3, 1),
                               "small_max_ms": round(max(lat) * 1e3, 1)}
        stop = threading.Event()

        def steady() -> None:
            with httpx.Client(timeout=30) as c:
                while not stop.is_set():
                    try:
                        c.post(url, json={"model": NAME, "input": "steady traffic"})
                    except httpx.HTTPError:
                        pass

        threads = [threading.Thread(target=steady) for _ in range(8)]
        for th in threads:
            th.start()
        time.sleep(3)
        t0 = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=120)
        doc["sigterm_under_traffic_s"] = round(time.monotonic() - t0, 1)
        stop.set()
        for th in threads:
            th.join(60)
        doc["restarts_during_run"] = (work / "serve.log").read_text().count("recovering")
    finally:
        for proc in (gw, serve):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    print(json.dumps(doc, indent=2))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "reliability.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
