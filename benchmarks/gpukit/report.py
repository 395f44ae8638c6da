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


def targets(doc: dict) -> list[str]:
    """Issue #67's GPU targets, each with its measured value (medians) or '-' where the cell did not run."""
    rows = []

    def add(what: str, got, want: str, ok) -> None:
        rows.append(f"| {what} | {got} | {want} | {'-' if ok is None else 'met' if ok else 'NOT met'} |")

    c1, c4 = _cell(doc, "xlmr-large", "<=128", 1, 1), _cell(doc, "xlmr-large", "<=128", 1, 4)
    add("bge-m3's shape, one text <=128 tokens, c1 p50 ms", _f(c1 and c1["p50_ms"]["median"]), "<= 2",
        c1 and c1["p50_ms"]["median"] <= 2)
    add("... c4 p50 ms / p99 ms", f"{_f(c4 and c4['p50_ms']['median'])} / {_f(c4 and c4['p99_ms']['median'])}",
        "<= 3 / <= 5", c4 and c4["p50_ms"]["median"] <= 3 and c4["p99_ms"]["median"] <= 5)
    bb = _cell(doc, "bert-base", "<=32", 1, 256)
    add("BERT-base, one text <=32 tokens, c256 req/s / p99 ms",
        f"{_f(bb and bb['req_per_s']['median'], '.0f')} / {_f(bb and bb['p99_ms']['median'])}", ">= 5,000 / <= 15",
        bb and bb["req_per_s"]["median"] >= 5000 and bb["p99_ms"]["median"] <= 15)
    lg = _cell(doc, "xlmr-large", "512", 8, 64)
    inproc = doc.get("models", {}).get("xlmr-large", {}).get("in_process", {}).get("512", {}).get("texts_per_s")
    ratio = lg["texts_per_s"]["median"] / inproc if lg and inproc else None
    add("bge-m3's shape, 512-token texts, 8 per request, c64 texts/s (x in process)",
        f"{_f(lg and lg['texts_per_s']['median'], '.0f')} ({_f(ratio)}x)", ">= 1,200 (>= 0.9x)",
        None if lg is None else lg["texts_per_s"]["median"] >= 1200 and (ratio is None or ratio >= 0.9))
    cos = [c.get("min_cosine") for m in doc.get("models", {}).values() for c in m.get("cells", []) if c.get("min_cosine")]
    add("min cosine vs SentenceTransformer.encode, every timed cell", _f(min(cos) if cos else None, ".6f"), ">= 0.9999",
        (min(cos) >= 0.9999) if cos else None)
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
    top = max((v["req_per_s"]["median"] for v in floor.values()), default=None)
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
            for c in rec["cells"]:
                share = c["req_per_s"]["median"] / top if top else None
                onoff = c.get("graphs_on_vs_off")
                lines.append(f"| {c['band']} | {c['per']} | {c['concurrency']} | {'on' if c['graphs'] else 'off'} | "
                             f"{_s(c['req_per_s'], '.0f')} | {_s(c['texts_per_s'], '.0f')} | {_s(c['p50_ms'])} | "
                             f"{_s(c['p99_ms'])} | {_f(c.get('min_cosine'), '.6f')} | "
                             f"{_f(onoff and onoff['min_cosine'], '.6f')} | {c['errors']} | "
                             f"{_f(share)}{' (generator-bound?)' if share and share > 1 / 3 else ''} |")
        inproc = rec.get("in_process", {})
        if inproc:
            lines += ["", "| texts | in process (warm, best of 3): one text p50 / p99 ms | batches texts/s |", "|---|---|---|"]
            for label, v in inproc.items():
                lines.append(f"| {label} | {_f(v.get('p50_ms'))} / {_f(v.get('p99_ms'))} | "
                             f"{_f(v.get('texts_per_s'), '.1f')} (batch {v.get('batch')}) |")
        lines.append("")
    if doc.get("error"):
        lines += ["**Stopped on an error** (kit.log has the traceback).", ""]
    return "\n".join(lines) + "\n"
