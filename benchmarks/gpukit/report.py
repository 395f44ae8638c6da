"""The GPU kit's table (table.md): the load generator's floor, issue #67's targets with what was measured,
then per model parity per bucket and every cell (medians over the rounds, the spread in brackets, the timed
vectors' min cosine), beside sentence-transformers in process."""

from __future__ import annotations


def _f(x, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _s(d: dict | None, spec: str = ".2f") -> str:
    """median (min-max)"""
    if not d:
        return "-"
    return f"{d['median']:{spec}} ({d['min']:{spec}}-{d['max']:{spec}})"


def _cell(doc: dict, model: str, band: str, per: int, conc: int, graphs: bool = True) -> dict | None:
    for c in doc.get("models", {}).get(model, {}).get("cells", []):
        if (c["band"], c["per"], c["concurrency"], c["graphs"]) == (band, per, conc, graphs):
            return c
    return None


def _med(c: dict | None, key: str):
    return c[key]["median"] if c and c.get(key) else None


def targets(doc: dict) -> list[str]:
    """Issue #67's GPU targets, each with its measured value (medians) or '-' where the cell did not run; a
    cell with a failed request meets no target."""
    rows = []

    def add(what: str, got, want: str, cells: list, ok) -> None:
        if any(c is not None and c["errors"] for c in cells):
            ok = False
        rows.append(f"| {what} | {got} | {want} | {'-' if ok is None else 'met' if ok else 'NOT met'} |")

    def le(x, bound):
        return None if x is None else x <= bound

    c1, c4 = _cell(doc, "xlmr-large", "<=128", 1, 1), _cell(doc, "xlmr-large", "<=128", 1, 4)
    add("bge-m3's shape, one text <=128 tokens, c1 p50 ms", _f(_med(c1, "p50_ms")), "<= 2", [c1], le(_med(c1, "p50_ms"), 2))
    p50, p99 = _med(c4, "p50_ms"), _med(c4, "p99_ms")
    add("... c4 p50 ms / p99 ms", f"{_f(p50)} / {_f(p99)}", "<= 3 / <= 5", [c4],
        None if p50 is None or p99 is None else p50 <= 3 and p99 <= 5)
    bb = _cell(doc, "bert-base", "<=32", 1, 256)
    rate, p99 = _med(bb, "req_per_s"), _med(bb, "p99_ms")
    add("BERT-base, one text <=32 tokens, c256 req/s / p99 ms", f"{_f(rate, '.0f')} / {_f(p99)}", ">= 5,000 / <= 15", [bb],
        None if rate is None or p99 is None else rate >= 5000 and p99 <= 15)
    lg = _cell(doc, "xlmr-large", "512", 8, 64)
    inproc = doc.get("models", {}).get("xlmr-large", {}).get("in_process", {}).get("512 x32", {}).get("texts_per_s")
    tps = _med(lg, "texts_per_s")
    ratio = tps / inproc if tps and inproc else None
    add("bge-m3's shape, 512-token texts, 8 per request, c64 texts/s (x in process, batches of 32)",
        f"{_f(tps, '.0f')} ({_f(ratio)}x)", ">= 1,200 (>= 0.9x)", [lg],
        None if tps is None or ratio is None else tps >= 1200 and ratio >= 0.9)
    cells = [c for m in doc.get("models", {}).values() for c in m.get("cells", [])]
    cos = [c.get("min_cosine") for c in cells]
    worst = None if not cells or any(x is None for x in cos) else min(cos)
    add("min cosine vs SentenceTransformer.encode, every timed cell", _f(worst, ".6f") if cells else "-", ">= 0.9999", cells,
        None if not cells else (worst is not None and worst >= 0.9999))
    return ["| target | measured | wanted | |", "|---|---|---|---|", *rows]


def table(doc: dict) -> str:
    load = doc.get("load", {})
    lines = [f"# embtrt GPU kit, {doc.get('started', '?')}", "",
             f"Device: {doc.get('gpu') or doc.get('device', '?')}; torch {doc.get('versions', {}).get('torch', '?')} "
             f"(CUDA {doc.get('versions', {}).get('cuda')}); Python {doc.get('setup', {}).get('python', '?')}; "
             f"stub numpy {doc.get('setup', {}).get('stub_numpy', '?')}; {doc.get('elapsed_s', 0)} s", "",
             f"Load: {load.get('generator', '?')} over {load.get('protocol', '?')}, {load.get('processes', '?')} processes; "
             "every cell repeated, medians with (min-max).", ""]
    if doc.get("setup", {}).get("failed"):
        f = doc["setup"]["failed"]
        lines += [f"**Setup failed:** {f['what']}", f"hint: {f['hint']}", ""]
    floor = doc.get("floor", {})
    if floor:
        lines += ["The floor (a model with no encoder, the same generator): " + "; ".join(
            f"{k}: {_s(v['req_per_s'], '.0f')} req/s, p50 {_s(v['p50_ms'])} ms" for k, v in floor.items()), ""]
    lines += ["## Targets (issue #67)", "", *targets(doc), ""]
    top = max((v["req_per_s"]["median"] for v in floor.values() if v.get("req_per_s")), default=None)
    for key, rec in doc.get("models", {}).items():
        b = rec.get("build", {})
        refused = "; ".join(f"{r['precision']} refused ({r['refused'][:120]})" for r in b.get("refused", []))
        lines += [f"## {key} ({rec['shape']['layers']} x {rec['shape']['hidden']}, {rec['shape']['pooling']} pooling), "
                  f"{b.get('precision', '?')}" + (f"; {refused}" if refused else ""), ""]
        if "apart_median_cosine" in rec:
            lines.append(f"Reference texts apart: median cosine {rec['apart_median_cosine']} between different texts.")
        if rec.get("parity"):
            lines += ["", "| bucket | texts | cosine p50 | p01 | min | gate |", "|---|---|---|---|---|---|"]
            for label, p in rec["parity"].items():
                lines.append(f"| {label} | {p['texts']} | {p['cosine_p50']:.6f} | {p['cosine_p01']:.6f} | "
                             f"{p['cosine_min']:.6f} | {'ok' if p['passed'] else 'FAILED'} |")
        if rec.get("cells"):
            lines += ["", "| texts | per request | conc | graphs | req/s | texts/s | p50 ms | p99 ms | min cosine | "
                      "graphs on vs off | errors | of the floor |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for c in rec["cells"]:   # the floor is one text per request: one-text cells are judged against it
                share = _med(c, "req_per_s") / top if top and c["per"] == 1 and _med(c, "req_per_s") else None
                onoff = c.get("graphs_on_vs_off")
                lines.append(f"| {c['band']} | {c['per']} | {c['concurrency']} | {'on' if c['graphs'] else 'off'} | "
                             f"{_s(c['req_per_s'], '.0f')} | {_s(c['texts_per_s'], '.0f')} | {_s(c['p50_ms'])} | "
                             f"{_s(c['p99_ms'])} | {_f(c.get('min_cosine'), '.6f')} | "
                             f"{_f(onoff and onoff['min_cosine'], '.6f')} | {c['errors']} | "
                             f"{_f(share)}{' (generator-bound?)' if share and share > 1 / 3 else ''} |")
        inproc = rec.get("in_process", {})
        if inproc:
            lines += ["", "| texts x per call | in process (warm, best of 3): one text p50 / p99 ms | batches texts/s |",
                      "|---|---|---|"]
            for label, v in inproc.items():
                lines.append(f"| {label} | {_f(v.get('p50_ms'))} / {_f(v.get('p99_ms'))} | "
                             f"{_f(v.get('texts_per_s'), '.1f')} (batch {v.get('batch')}) |")
        lines.append("")
    if doc.get("error"):
        lines += ["**Stopped on an error** (kit.log has the traceback).", ""]
    return "\n".join(lines) + "\n"
