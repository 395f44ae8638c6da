"""The request path's floor: a repository of one trivial model (the front door's TEXT -> EMBEDDING
signature, zeros, no encoder; python_backend/floor), served beside the model under test so that the
load generator is measured on the same machine: what it drives there is the most it can drive, and a
rate near it was set by the generator, not by the model (embtrt.measure.loadgen.HEADROOM)."""

from __future__ import annotations

import shutil
from pathlib import Path

import jinja2

from .. import __version__
from ..common.resources import python_backend_dir, templates_dir

FLOOR_MODEL = "embtrt_floor"
FLOOR_TARGET = "floor (no encoder)"   # its target's name in `embtrt bench --floor`'s results


def headroom_lines(results: list[dict]) -> list[str]:
    """For each scenario that has the floor: each other Triton target's rate as a share of the floor's, and
    whether the generator may have set it (the floor under HEADROOM x the target's rate)."""
    from .loadgen import HEADROOM

    floors = {(r["bucket"], r["concurrency"], r["texts_per_request"]): r["req_per_s"] for r in results
              if r["target"] == FLOOR_TARGET}
    out = []
    for r in results:
        f = floors.get((r["bucket"], r["concurrency"], r["texts_per_request"]))
        if f and r["target"] != FLOOR_TARGET and r["kind"] == "triton" and r["req_per_s"] > 0:
            verdict = "not the limit" if f >= HEADROOM * r["req_per_s"] else "generator-bound? (the floor is under 3x)"
            out.append(f"- {r['target']} {r['bucket']} c{r['concurrency']}: {r['req_per_s']:.0f} req/s, the floor "
                       f"{f:.0f} ({f / r['req_per_s']:.1f}x): {verdict}")
    return out


def write_floor(dest: Path, dim: int = 64, max_batch_size: int = 64, instances: int = 2,
                name: str = FLOOR_MODEL) -> Path:
    """dest/<name>/{config.pbtxt, 1/model.py} -> dest (a model repository)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    env.filters["q"] = lambda v: '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
    text = env.get_template("floor.pbtxt.j2").render(
        name=name, version=__version__, max_batch_size=max_batch_size,
        inputs=[{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}],
        outputs=[{"name": "EMBEDDING", "data_type": "TYPE_FP32", "dims": [dim]}],
        batching={"preferred_batch_sizes": [max_batch_size], "max_queue_delay_us": 0, "max_queue_size": 0,
                  "queue_timeout_us": 0},
        group={"count": instances, "kind": "KIND_CPU", "gpus": [], "profiles": []})
    folder = Path(dest) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(text)
    shutil.copy2(python_backend_dir() / "floor" / "model.py", folder / "1" / "model.py")
    return Path(dest)
