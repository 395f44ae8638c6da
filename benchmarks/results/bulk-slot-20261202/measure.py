"""One large request alone, then the same large request with small requests sent one after another
while it runs, against two gateways in alternating rounds (never both loaded at once): the large
request's seconds and the small requests' latencies. Plain HTTP (httpx), OpenAI embeddings shape.

    python measure.py --gateway base=http://127.0.0.1:P1 --gateway head=http://127.0.0.1:P2 --model NAME"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import httpx

from embtrt.common.corpus import load_corpus


def one_round(url: str, model: str, big: list[str]) -> dict:
    body = {"model": model, "input": big}
    t0 = time.monotonic()
    r = httpx.post(url + "/v1/embeddings", json=body, timeout=900)
    r.raise_for_status()
    alone = time.monotonic() - t0
    out: dict = {}

    def run() -> None:
        t = time.monotonic()
        httpx.post(url + "/v1/embeddings", json=body, timeout=900).raise_for_status()
        out["big_s"] = time.monotonic() - t

    th = threading.Thread(target=run)
    th.start()
    time.sleep(0.5)  # the large request admitted and its parts upstream
    lat = []
    i = 0
    while th.is_alive():
        t = time.monotonic()
        httpx.post(url + "/v1/embeddings", json={"model": model, "input": f"a short query {i}"}, timeout=900).raise_for_status()
        lat.append((time.monotonic() - t) * 1000)
        i += 1
    th.join()
    return {"alone_s": alone, "with_small_big_s": out["big_s"], "small_ms": lat}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", action="append", required=True, help="LABEL=URL")
    ap.add_argument("--model", required=True)
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    sides = [g.split("=", 1) for g in a.gateway]
    corpus = load_corpus()
    long = " ".join(corpus[:12])[:1900]  # cut at 256 tokens, as tests/integration/test_gateway_limits.py
    big = [f"{i} {long}" for i in range(a.texts)]
    for _label, url in sides:  # warm-up
        httpx.post(url + "/v1/embeddings", json={"model": a.model, "input": big[:64]}, timeout=900).raise_for_status()
    rows: dict[str, list] = {label: [] for label, _ in sides}
    for rnd in range(a.rounds):
        for label, url in (sides if rnd % 2 == 0 else sides[::-1]):
            res = one_round(url, a.model, big)
            rows[label].append(res)
            s = res["small_ms"]
            print(f"round {rnd + 1} {label}: alone {res['alone_s']:.2f} s, with small {res['with_small_big_s']:.2f} s; "
                  f"{len(s)} small: p50 {statistics.median(s):.0f} ms, max {max(s):.0f} ms", flush=True)
    summary = {}
    for label, rs in rows.items():
        small = [x for r in rs for x in r["small_ms"]]
        summary[label] = {"alone_s_median": statistics.median(r["alone_s"] for r in rs),
                          "with_small_big_s_median": statistics.median(r["with_small_big_s"] for r in rs),
                          "small_count": len(small), "small_p50_ms": statistics.median(small),
                          "small_max_ms": max(small)}
        print(label, json.dumps(summary[label]))
    with open(a.out, "w") as fh:
        json.dump({"texts": a.texts, "rounds": rows, "summary": summary}, fh, indent=1)


if __name__ == "__main__":
    main()
