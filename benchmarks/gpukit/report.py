"""The GPU kit's table (table.md): parity per bucket, then per model and bucket p50 / p99 / req/s at
each concurrency with and without CUDA graphs, beside sentence-transformers in process."""

from __future__ import annotations


def _f(x, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def table(doc: dict) -> str:
    lines = [f"# embtrt GPU kit, {doc.get('started', '?')}", "",
             f"Device: {doc.get('gpu') or doc.get('device', '?')}; torch {doc.get('versions', {}).get('torch', '?')} "
             f"(CUDA {doc.get('versions', {}).get('cuda')}); Python {doc.get('setup', {}).get('python', '?')}; "
             f"stub numpy {doc.get('setup', {}).get('stub_numpy', '?')}; {doc.get('elapsed_s', 0)} s", ""]
    if doc.get("setup", {}).get("failed"):
        f = doc["setup"]["failed"]
        lines += [f"**Setup failed:** {f['what']}", f"hint: {f['hint']}", ""]
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
        cells = rec.get("cells", [])
        inproc = rec.get("in_process", {})
        if cells:
            lines += ["", "| bucket | graphs | conc | req/s | p50 ms | p99 ms | errors | p50 / in-process single |",
                      "|---|---|---|---|---|---|---|---|"]
            for c in sorted(cells, key=lambda c: (c["bucket"], not c["graphs"], c["concurrency"])):
                single = inproc.get(c["bucket"], {}).get("single", {}).get("p50_ms")
                ratio = (c["p50_ms"] / single) if single and c["p50_ms"] else None
                lines.append(f"| {c['bucket']} | {'on' if c['graphs'] else 'off'} | {c['concurrency']} | "
                             f"{_f(c['req_per_s'], '.1f')} | {_f(c['p50_ms'])} | {_f(c['p99_ms'])} | {c['errors']} | "
                             f"{_f(ratio)} |")
        if inproc:
            lines += ["", "| bucket | in process: single p50 ms | p99 ms | batch 32 texts/s |", "|---|---|---|---|"]
            for label, v in inproc.items():
                lines.append(f"| {label} | {_f(v['single']['p50_ms'])} | {_f(v['single']['p99_ms'])} | "
                             f"{_f(v['batch']['texts_per_s'], '.1f')} |")
        lines.append("")
    if doc.get("error"):
        lines += ["**Stopped on an error** (kit.log has the traceback).", ""]
    return "\n".join(lines) + "\n"
