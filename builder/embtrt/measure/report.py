"""The written results of the measurements: `embtrt bench` (results.json / .md, a latency and
throughput plot per bucket), `embtrt matrix` (matrix.json / .md / .png) and `embtrt tune`
(tune.json / .md, the trials against the SLO), with the machine they ran on."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any


def machine() -> dict:
    info: dict[str, object] = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
        info["isa"] = sorted({f for f in flags.split() if f.startswith(("avx512", "amx", "avx2"))})
        mem = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        info["memory_gib"] = round(int(mem.split()[1]) / 2**20, 1)
    except (OSError, StopIteration):
        pass
    return info


# ---- embtrt bench ----------------------------------------------------------------------

def markdown(doc: dict) -> str:
    cpu_keys = sorted({k for r in doc["results"] for k in r.get("cpu_ms_per_req", {})})
    lines = [f"# embtrt bench, {doc['started']}", "",
             f"Machine: {doc['machine'].get('cpu', '?')}, {doc['machine'].get('cpus')} CPUs, "
             f"{doc['machine'].get('memory_gib', '?')} GiB; Python {doc['machine']['python']}", "",
             f"Scenario: {doc['scenario']['requests']} requests of {doc['scenario']['texts_per_request']} text(s) per "
             f"target, bucket and concurrency ({doc['scenario']['warmup']} warm-up requests excluded); "
             f"texts per bucket: {doc['scenario']['bucket_sizes']}", "",
             "| target | bucket | conc | req/s | texts/s | tokens/s | p50 ms | p95 ms | p99 ms | max ms | errors | "
             "Triton queue/compute µs (front door) |" + "".join(f" CPU ms/req {k} |" for k in cpu_keys) +
             (" CPU ms/req total |" if cpu_keys else "") + "".join(f" peak RSS MiB {k} |" for k in cpu_keys) +
             (" CPU ms/req load generator |" if cpu_keys else ""),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|" + "---:|" * (2 * len(cpu_keys) + 2 * bool(cpu_keys))]
    for r in doc["results"]:
        tri = ""
        front = r["triton"].get(next((t["model"] for t in doc["targets"] if t["name"] == r["target"]), ""), None)
        if front:
            tri = f"{front['queue_us']:.0f} / {front['compute_us']:.0f}"
        lines.append(f"| {r['target']} | {r['bucket']} | {r['concurrency']} | {r['req_per_s']:.1f} | "
                     f"{r['texts_per_s']:.1f} | {r['tokens_per_s']:.0f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
                     f"{r['p99_ms']:.1f} | {r['max_ms']:.1f} | {r['errors']} | {tri} |"
                     + "".join(f" {r.get('cpu_ms_per_req', {}).get(k, float('nan')):.2f} |" for k in cpu_keys)
                     + (f" {sum(r.get('cpu_ms_per_req', {}).values()):.2f} |" if cpu_keys else "")
                     + "".join(f" {r.get('peak_rss_mib', {}).get(k, float('nan')):.0f} |" for k in cpu_keys)
                     + (f" {r.get('client_cpu_ms_per_req') or float('nan'):.2f} |" if cpu_keys else ""))
    from .floor import headroom_lines

    headroom = headroom_lines(doc["results"])
    if headroom:
        lines += ["", "The load generator against the floor (a model with no encoder, the same generator and texts):", "",
                  *headroom]
    return "\n".join(lines) + "\n"


def plots(doc: dict, out_dir: Path) -> list[Path]:
    """Per bucket: p50/p95/p99 latency and throughput vs concurrency, one line per target."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    res = doc["results"]
    written = []
    for bucket in dict.fromkeys(r["bucket"] for r in res):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        for target in dict.fromkeys(r["target"] for r in res):
            rows = sorted((r for r in res if r["bucket"] == bucket and r["target"] == target and r["kind"] != "inprocess"),
                          key=lambda r: r["concurrency"])
            if rows:
                xs = [r["concurrency"] for r in rows]
                for q, style in (("p50_ms", "-"), ("p95_ms", "--"), ("p99_ms", ":")):
                    ax1.plot(xs, [r[q] for r in rows], style, marker="o", label=f"{target} {q[:3]}")
                ax2.plot(xs, [r["req_per_s"] for r in rows], marker="o", label=target)
            inproc = [r for r in res if r["bucket"] == bucket and r["target"] == target and r["kind"] == "inprocess"]
            for r in inproc:
                ax1.axhline(r["p50_ms"], color="grey", linestyle="-.", label=f"{target} p50")
                ax2.axhline(r["req_per_s"], color="grey", linestyle="-.", label=target)
        levels = sorted({r["concurrency"] for r in res if r["bucket"] == bucket and r["kind"] != "inprocess"}) or [1]
        ax1.set(xscale="log", yscale="log", xlabel="concurrency", ylabel="latency (ms)", title=f"latency, bucket {bucket}")
        ax2.set(xscale="log", xlabel="concurrency", ylabel="requests/s", title=f"throughput, bucket {bucket}")
        for ax in (ax1, ax2):
            ax.set_xticks(levels)
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax1.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax1.legend(fontsize=6)
        ax2.legend(fontsize=6)
        fig.tight_layout()
        name = "bench_" + bucket.replace("<=", "le").replace(">", "gt") + ".png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(out_dir / name)
    return written


def plots_unavailable() -> str | None:
    """Why the PNG plots cannot be drawn here (matplotlib missing), or None. Asked before a long run."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"matplotlib is not installed ({exc}): pip install 'embtrt[bench]' for the PNG plots"
    return None


def save(doc: dict, out_dir: Path, with_plots: bool = True) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out_dir / "results.md").write_text(markdown(doc))
    return [out_dir / "results.json", out_dir / "results.md", *(plots(doc, out_dir) if with_plots else [])]


# ---- embtrt matrix --------------------------------------------------------------------

def matrix_markdown(doc: dict) -> str:
    lines = [f"# embtrt matrix: {doc['model']} ({doc['target']}, {doc['precision']})", "",
             f"Machine: {doc['machine'].get('cpu', '?')}, {doc['machine'].get('cpus')} CPUs. Built with a token budget "
             f"of {doc['built_budget']} (max batch size {doc['max_batch_size']}); {doc['requests_per_cell']} requests per "
             f"cell, one text each. Bands: " + ", ".join(f"{k} ({v['tokens'][0]}..{v['tokens'][1]} tokens)"
                                                          for k, v in doc["bands"].items()) + ".", ""]
    for budget in doc["budgets"]:
        cells = [c for c in doc["cells"] if c["budget"] == budget]
        got = doc.get("server_max_batch", {}).get(str(budget), {})
        lines += [f"## max_batch_tokens {budget}", "",
                  "Max batch per bucket as the server reported it after the reload: "
                  + ", ".join(f"{b}: {n}" for b, n in got.items()) + ".", "",
                  "| cell | band / route | conc | sent | ok | errors | req/s | tokens/s | p50 ms | p95 ms | p99 ms | "
                  "cos min | cos p01 | peak RSS MiB | GPU peak MiB | notes |",
                  "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
        for c in cells:
            errs = str(c["errors"]) + (f" {c['error_kinds']}" if c["errors"] else "")
            notes = ""
            if c["kind"] == "preempt":
                ld = c["extra"]["load"]
                notes = (f"{'passed' if c['extra'].get('passed', True) else 'FAILED'}: {c['extra']['long_tokens']}-token "
                         f"text under short load: load {ld['ok']}/{ld['sent']} ok, {ld['req_per_s']:.0f} req/s, "
                         f"p50 {ld.get('p50_ms', float('nan')):.1f} ms, p99 {ld.get('p99_ms', float('nan')):.1f} ms, "
                         f"max {ld.get('max_ms', float('nan')):.0f} ms")
            elif c["kind"] == "pools":
                lg = c["extra"]["long"]
                notes = f"long beside it: {lg['ok']} ok, {lg['req_per_s']:.1f} req/s, p95 {lg['p95_ms']:.0f} ms"
            elif c["kind"] == "mixed" and c["extra"]:
                notes = f"p95 {c['extra']['p95_vs_alone']}x alone; long: {c['extra']['long']['ok']} ok"
            cos = (lambda v: "" if v is None else f"{v:.6f}")
            gpu = ", ".join(f"{k}: {v:.0f}" for k, v in c["gpu_peak_mib"].items()) or "-"
            lines.append(f"| {c['kind']} | {c['band']} | {c['concurrency']} | {c['sent']} | {c['ok']} | {errs} | "
                         f"{c['req_per_s']:.1f} | {c['tokens_per_s']:.0f} | {c['p50_ms']:.1f} | {c['p95_ms']:.1f} | "
                         f"{c['p99_ms']:.1f} | {cos(c['cos_min'])} | {cos(c['cos_p01'])} | "
                         f"{c['peak_rss_mib'] if c['peak_rss_mib'] is not None else '-'} | {gpu} | {notes} |")
        lines.append("")
    return "\n".join(lines)


def matrix_plots(doc: dict, out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    cells = [c for c in doc["cells"] if c["kind"] == "band"]
    bands = sorted({c["band"] for c in cells}, key=lambda b: int(b[2:]))
    conc = max(doc["concurrency"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for b in bands:
        pts = sorted((c["budget"], c) for c in cells if c["band"] == b and c["concurrency"] == conc)
        xs = [p[0] for p in pts]
        axes[0].plot(xs, [p[1]["tokens_per_s"] for p in pts], "o-", label=b)
        axes[1].plot(xs, [p[1]["p95_ms"] for p in pts], "o-", label=b)
        axes[2].plot(xs, [p[1]["peak_rss_mib"] or 0 for p in pts], "o-", label=b)
    for ax, title in zip(axes, ("tokens/s", "p95 ms", "peak server RSS MiB")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("max_batch_tokens")
        ax.set_title(f"{title} at concurrency {conc}")
        ax.legend()
    fig.tight_layout()
    path = out / "matrix.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def write_matrix(doc: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "matrix.md").write_text(matrix_markdown(doc))
    return [out / "matrix.json", out / "matrix.md", *matrix_plots(doc, out)]


# ---- embtrt tune ----------------------------------------------------------------------

def fmt_settings(settings: dict[str, Any]) -> str:
    return " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, (tuple, list)) else v}" for k, v in settings.items())


def write_tune(doc: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "tune.json").write_text(json.dumps(doc, indent=2) + "\n")
    conc = max(doc["concurrency"])
    lines = [f"# embtrt tune: SLO {doc['slo']} at concurrency {doc['concurrency']}", "",
             f"Scenario: {doc['scenario']}. " + (f"Winner: trial {doc['winner'] + 1}, margin {doc['margin']}."
                                                 if doc["winner"] is not None else "No trial met the SLO."), "",
             f"| trial | settings | req/s at c{conc} | p50 ms | worst p99 ms | within SLO | Pareto |", "|---|---|---:|---:|---:|---|---|"]
    for i, t in enumerate(doc["trials"]):
        r = t["results"][str(conc)]
        worst = max(x["p99_ms"] for x in t["results"].values())
        lines.append(f"| {i + 1}{' (winner)' if i == doc['winner'] else ''} | {fmt_settings(t['settings'])} | {r['req_per_s']:.1f} | "
                     f"{r['p50_ms']:.1f} | {worst:.1f} | {'yes' if t['feasible'] else 'no'} | {'*' if i in doc['pareto'] else ''} |")
    (out / "tune.md").write_text("\n".join(lines) + "\n")
    written = [out / "tune.json", out / "tune.md"]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return written
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [max(x["p99_ms"] for x in t["results"].values()) for t in doc["trials"]]
    ys = [t["results"][str(conc)]["req_per_s"] for t in doc["trials"]]
    ax.scatter(xs, ys, c=["tab:green" if t["feasible"] else "tab:gray" for t in doc["trials"]], label="trials")
    front = sorted(doc["pareto"], key=lambda i: xs[i])
    ax.plot([xs[i] for i in front], [ys[i] for i in front], "r--", label="Pareto front")
    w = doc["winner"]
    if w is not None:
        ax.scatter([xs[w]], [ys[w]], s=160, facecolors="none", edgecolors="black", label="winner")
    if not isinstance(doc["slo_p99_ms"], dict):  # per-band SLOs have no one line to draw
        ax.axvline(doc["slo_p99_ms"], color="tab:orange", linestyle=":", label="SLO")
    ax.set_xlabel("worst p99 over the concurrencies (ms)")
    ax.set_ylabel(f"req/s at concurrency {conc}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "tune.png", dpi=110)
    plt.close(fig)
    return written + [out / "tune.png"]
