"""The GPU kit: python-torch on CUDA inside Triton, built, gated and measured in one short call.

    python3 benchmarks/gpukit/kit.py --out "$OUT"                  # on the GPU host (benchmarks/gpukit/run.sh)
    python3 benchmarks/gpukit/kit.py --out DIR --dry-run           # on a CPU: tiny shapes, --device cpu

1. Setup, checked first with clear messages: the kit (`make gpu-kit`, .gpukit/) unpacked; the
   Python-backend stub for this Python and its libraries (ldd); numpy below 2 for the stub's
   Python where the host's is 2.x (a venv over the host's packages with the carried numpy 1.26);
   the build's pure-Python pieces the host lacks (carried wheels, unpacked beside the kit).
2. The floor: a model with no encoder (embtrt.measure.floor) on the kit's tritonserver, driven by the
   load generator (embtrt.measure.loadgen: gRPC where tritonclient's stubs and the host's grpcio import,
   else HTTP; 4 processes): what the generator can drive on this host.
3. Per model, most valuable first (bge-m3's XLM-R-large encoder, then BERT-base's, then all-MiniLM-L6-v2's
   shape; benchmarks/gpukit/models.py): weights from a fixed seed; `embtrt build --target python-torch
   --device cuda` in fp16 (its gate runs on the GPU; a precision that fails is recorded with its figures
   and the next one tried: bf16, then fp32); tritonserver on 127.0.0.1 with the kit's tritonserver; the
   served vectors against the fp32 reference on the same weights per bucket; then the planned cells
   (benchmarks/gpukit/cells.py: issue #67's targets first), each repeated, every timed vector compared
   with its reference, the in-process peer warm and the best of three, graphs off against graphs on,
   until the deadline.
4. Every result is written as it is measured: results.json, table.md, kit.log, and the tail of
   each tritonserver log (at most 8 files under --out, what the device tool brings back).

The dry run (--dry-run) is the same code on this CPU with tiny shapes: `--device cpu`, and the
static-shape runs with graphs switched on by a reload (the CPU stand-in of the CUDA graphs,
embtrt_backend.torch_graphs) against the build's eager ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import venv
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "builder"), str(ROOT / "python_backend")]

BUCKETS = (32, 128, 512)
TINY_BUCKETS = (16, 64)


class Kit:
    """The run's log, results and deadline; every result is written out as soon as it exists."""

    def __init__(self, out: Path, deadline_s: float) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.deadline = self.t0 + deadline_s
        self.logf = (out / "kit.log").open("a")
        self.doc: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "models": {}, "setup": {}}

    def log(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        self.logf.write(line + "\n")
        self.logf.flush()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def write(self) -> None:
        self.doc["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        (self.out / "results.json").write_text(json.dumps(self.doc, indent=2) + "\n")
        from report import table

        (self.out / "table.md").write_text(table(self.doc))


def fail(kit: Kit, what: str, hint: str) -> None:
    kit.doc["setup"]["failed"] = {"what": what, "hint": hint}
    kit.log(f"[x] {what}\n    hint: {hint}")
    kit.write()
    sys.exit(2)


def unpack_wheel(wheel: Path, dest: Path) -> None:
    """A wheel is a zip of its installed files: unpacked straight into a site-packages folder."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest)


# What the stub's Python does not see of the host's packages (besides numpy, where the kit's 1.26 replaces
# it): optional imports of transformers that are built for numpy 2 on the host. transformers imports
# scikit-learn whenever importlib finds it (generation/candidate_generator.py), and the host's scikit-learn
# and SciPy fail to import under numpy 1.26: the H200 host (2026-12-04) answered every model load with
# "ModuleNotFoundError: Could not import module 'AutoModel'". Hidden, transformers takes them as absent.
STUB_HIDDEN = ("scipy", "sklearn", "scikit_learn")
# What the stub imports before its first request: numpy, torch on the device, the tokenizer and the
# AutoModel classes the backend loads (embtrt_backend.torch_encoder), each one's model module.
STUB_CHECK = ("import numpy, torch, tokenizers, transformers\n"
              "from transformers import AutoModel, AutoModelForSequenceClassification, AutoModelForMaskedLM\n"
              "import transformers.models.bert.modeling_bert, transformers.models.xlm_roberta.modeling_xlm_roberta\n"
              "print(numpy.__version__, torch.__version__, torch.cuda.is_available())")


def host_view(packages: Path, view: Path, hidden: tuple[str, ...]) -> Path:
    """A folder of links to every entry of `packages` except the distributions named in `hidden`
    (the package, its NAME-x.y.dist-info and NAME.libs); -> the folder."""
    view.mkdir(parents=True)
    for entry in packages.iterdir():
        name = entry.name.lower()
        if any(name == h or name.startswith((h + "-", h + ".")) for h in hidden):
            continue
        (view / entry.name).symlink_to(entry)
    return view


def setup(kit: Kit, kit_dir: Path, work: Path, force_venv: bool = False) -> dict:
    """Unpack the kit and check what the stub and the build need; -> server settings."""
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    kit.doc["setup"]["python"] = sys.version.split()[0]
    if not (kit_dir / "kit.json").is_file():
        fail(kit, f"no kit at {kit_dir}", "run `make gpu-kit` on the CPU machine and carry .gpukit/ with the call")
    with tarfile.open(kit_dir / "tritonserver.tar.xz") as tar:
        tar.extractall(work, filter="data")
    root = work / "tritonserver"
    stub = root / "python_backend_stubs" / ver / "triton_python_backend_stub"
    if not stub.is_file():
        fail(kit, f"the kit has no Python-backend stub for Python {ver}", "pack it: benchmarks/gpukit/pack.py STUBS")
    libs = work / "nvidia_pytriton.libs"
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([str(libs), *filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep))])
    missing = [line.strip() for line in subprocess.run(["ldd", str(stub)], capture_output=True, text=True).stdout.splitlines()
               if "not found" in line]
    if missing:
        fail(kit, f"the Python {ver} stub's libraries are missing: {'; '.join(missing)}",
             f"install the shared libpython{ver} (Debian/Ubuntu: libpython{ver}) on the GPU host")
    kit.log(f"[ok] tritonserver unpacked, stub for Python {ver} and its libraries found")
    site = work / "site"
    site.mkdir()
    wheels = {w.name.split("-")[0].lower(): w for w in (kit_dir / "wheels").glob("*.whl")}
    added = []
    for module, dist in (("jinja2", "jinja2"), ("markupsafe", "markupsafe"), ("tritonclient", "tritonclient")):
        try:
            __import__(module)
        except ImportError:
            unpack_wheel(wheels[dist], site)
            added.append(dist)
    import google.protobuf as pb

    if tuple(int(x) for x in pb.__version__.split(".")[:2]) < (6, 33):   # tritonclient's generated code needs it
        unpack_wheel(wheels["protobuf"], site)
        added.append(f"protobuf (the host has {pb.__version__})")
        for name in [m for m in sys.modules if m == "google.protobuf" or m.startswith("google.protobuf.")]:
            del sys.modules[name]
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    kit.doc["setup"]["carried_packages_used"] = added
    kit.log("[ok] build dependencies: " + (", ".join(added) + " from the kit" if added else "all on the host"))
    import numpy as np

    python_env = None
    numpy2 = int(np.__version__.split(".")[0]) >= 2
    if numpy2 or force_venv:
        if numpy2 and "numpy" not in wheels:
            fail(kit, f"numpy {np.__version__} here and no numpy 1.x in the kit", "pack it: benchmarks/gpukit/pack.py")
        python_env = work / "stubenv"
        venv.create(python_env, system_site_packages=False, with_pip=False, symlinks=True)
        sp = next((python_env / "lib").glob("python*/site-packages"))
        # This Python may itself be a venv (the GPU host's python3 is /opt/torch/.venv/bin/python3): a
        # venv made from it sees the base interpreter's packages, not these. Its packages are added
        # after the stub venv's own, so the numpy 1.x unpacked here comes first.
        import site
        import sysconfig

        host = [d for d in dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"],
                                          sysconfig.get_paths()["platlib"]]) if Path(d).is_dir()]
        hidden = ("numpy", *STUB_HIDDEN) if numpy2 else STUB_HIDDEN
        views = [host_view(Path(d), work / "hostview" / str(i), hidden) for i, d in enumerate(host)]
        (sp / "embtrt_host_packages.pth").write_text("".join(f"import site; site.addsitedir({str(v)!r})\n" for v in views))
        if numpy2:
            unpack_wheel(wheels["numpy"], sp)
        r = subprocess.run([str(python_env / "bin" / "python3"), "-c", STUB_CHECK],
                           capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        if r.returncode != 0:
            fail(kit, "the stub's Python (numpy 1.x over the host's packages) does not import what the backend "
                 f"imports (numpy, torch, tokenizers, transformers' AutoModel classes): {r.stderr.strip()[-1500:]}",
                 f"a host package built for numpy 2 is imported on the way: add it to STUB_HIDDEN ({', '.join(STUB_HIDDEN)})")
        kit.log(f"[ok] the stub's Python (a venv over this Python's packages): numpy, torch, CUDA = {r.stdout.strip()} "
                f"(this Python's numpy is {np.__version__})")
    kit.doc["setup"]["stub_numpy"] = "1.26.4 (kit)" if numpy2 else np.__version__
    kit.doc["setup"]["stub_python"] = str(python_env) if python_env else sys.executable
    from embtrt.serve import server

    return {"tritonserver": root / "bin" / "tritonserver", "backend_directory": server._pytriton_backends(root),
            "python_env": python_env}


def build_model(kit: Kit, key: str, folder: Path, repo: Path, device: str, buckets: tuple[int, ...],
                corpus: Path) -> dict:
    """fp16, else bf16, else fp32 on CUDA (each refusal recorded with its figures); fp32 on the CPU."""
    from embtrt.errors import ParityError
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    tried = []
    for precision in (("fp16", "bf16", "fp32") if device == "cuda" else ("fp32",)):
        if tried and kit.left() < 60:
            raise RuntimeError(f"{kit.left():.0f} s left: no time to build {key} in {precision} after "
                               + ", ".join(t["precision"] for t in tried) + " was refused")
        t0 = time.monotonic()
        lines: list[str] = []
        try:
            spec = spec_from_options(folder, repo, name=key.replace("-", "_"), target="python-torch", device=device,
                                     precision=precision, buckets=",".join(map(str, buckets)),
                                     max_seq_length=buckets[-1], bundle_deps=False, force=True)
            build(spec, force=True, corpus=corpus, log=lines.append)
        except ParityError as exc:
            tried.append({"precision": precision, "refused": exc.message, "gate": [x for x in lines if x.startswith("[")]})
            kit.log(f"[x] {key} {precision} refused by the gate: {exc.message[:300]}")
            continue
        gate = [x for x in lines if x.startswith(("[ok]", "[x]"))]
        kit.log(f"[ok] {key} built for {device} {precision} in {time.monotonic() - t0:.0f} s; gate: " + " | ".join(gate[:4]))
        return {"precision": precision, "refused": tried, "build_s": round(time.monotonic() - t0, 1), "gate": gate}
    raise RuntimeError(f"every precision of {key} failed its gate")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpukit-out")), help="results folder. Default $OUT.")
    ap.add_argument("--kit", type=Path, default=ROOT / ".gpukit", help="the packed kit. Default .gpukit/.")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU (--device cpu), few requests")
    ap.add_argument("--deadline-s", type=float, default=420.0, help="stop measuring after this long. Default 420.")
    ap.add_argument("--processes", type=int, default=None,
                    help="load generator processes. Default: 4 on the GPU host (a quarter of its 16 cores), 1 in the dry run.")
    ap.add_argument("--protocol", choices=("grpc", "http"), default=None,
                    help="the load's protocol. Default grpc where tritonclient's stubs and grpcio import, else http.")
    ap.add_argument("--models", default=None, help="comma-separated model shapes. Default: every one, bge-m3's "
                                                   "(xlmr-large) first, then bert-base, then minilm.")
    ap.add_argument("--stub-venv", action="store_true",
                    help="give the stub its own venv over this Python's packages even where numpy is below 2 (the dry run "
                         "checks the GPU host's path with it)")
    args = ap.parse_args()
    kit = Kit(args.out.resolve(), args.deadline_s)
    device = "cpu" if args.dry_run else "cuda"
    work = Path(tempfile.mkdtemp(prefix="embtrt-gpukit-"))
    try:
        run(kit, args, device, work)
    except SystemExit:
        raise
    except BaseException:
        kit.doc["error"] = traceback.format_exc()[-3000:]
        kit.log("[x] the kit stopped on an error:\n" + kit.doc["error"])
        kit.write()
        sys.exit(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def copy_log_tail(work: Path, out: Path, name: str, lines: int = 150) -> None:
    """The tail of one model's tritonserver log into the results, as soon as that model is done."""
    for log in work.glob(f"tritonserver-{name}*.log"):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        (out / log.name).write_text("\n".join(tail) + "\n")


def load_settings(kit: Kit, args: argparse.Namespace, device: str) -> dict:
    """The load generator's protocol and processes: gRPC where the stubs import (tritonclient's files, the
    host's grpcio), else HTTP (standard library); 4 processes on the GPU host, 1 in the dry run."""
    protocol = args.protocol
    if protocol is None:
        try:
            import grpc  # noqa: F401

            from embtrt.repository.proto import grpc_service

            grpc_service()
            protocol = "grpc"
        except Exception as exc:  # noqa: BLE001 (said in the log; HTTP needs nothing)
            kit.log(f"[x] gRPC load unavailable ({type(exc).__name__}: {exc}); the load goes over HTTP")
            protocol = "http"
    processes = args.processes or (4 if device == "cuda" else 1)
    kit.doc["load"] = {"protocol": protocol, "processes": processes, "generator": "embtrt.measure.loadgen"}
    return {"protocol": protocol, "processes": processes}


def run(kit: Kit, args: argparse.Namespace, device: str, work: Path) -> None:
    import torch

    from cells import DRY_PLAN, PLAN
    from models import SHAPES, TINY, make_model

    kit.doc["device"] = device
    kit.doc["versions"] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if device == "cuda" and not torch.cuda.is_available():
        fail(kit, "PyTorch sees no CUDA device", "run the kit on the GPU host, or --dry-run on a CPU")
    kit.doc["gpu"] = torch.cuda.get_device_name(0) if device == "cuda" else None
    kit.log(f"device {device}: {kit.doc['gpu'] or 'CPU dry run'}; torch {torch.__version__}; {os.cpu_count()} CPUs")
    server_settings = setup(kit, args.kit, work, args.stub_venv)
    load = load_settings(kit, args, device)
    kit.write()
    shapes = TINY if args.dry_run else SHAPES
    plans = DRY_PLAN if args.dry_run else PLAN
    keys = [k for k in (args.models.split(",") if args.models else plans) if k in shapes and k in plans]
    buckets = TINY_BUCKETS if args.dry_run else BUCKETS
    from embtrt.common.corpus import load_corpus

    corpus = load_corpus()
    gate_corpus = work / "gate-corpus.json"
    gate_corpus.write_text(json.dumps(corpus[::4]))
    from serving import measure_floor, serve_and_measure

    kit.doc["floor"] = measure_floor(kit, work, server_settings, corpus[:200], load, args.dry_run)
    kit.write()
    for i, key in enumerate(keys):
        if kit.left() < 45:
            kit.log(f"[skip] {key}: {kit.left():.0f} s left")
            continue
        rec: dict = {"shape": shapes[key]}
        kit.doc["models"][key] = rec
        try:   # one model's failure is its own result: the next model still runs
            folder = make_model(work / "models" / key, shapes[key], args.kit / "tokenizer", buckets[-1])
            repo = work / "repos" / key
            rec["build"] = build_model(kit, key, folder, repo, device, buckets, gate_corpus)
            kit.write()
            # the models after this one keep 60 s each for their build and their first cells
            serve_and_measure(kit, rec, key.replace("-", "_"), folder, repo, work, server_settings, device, buckets,
                              corpus, args.dry_run, plans[key], load, reserve_s=60.0 * (len(keys) - i - 1))
        except Exception as exc:
            rec["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            kit.log(f"[x] {key}: {rec['error']}\n{traceback.format_exc()[-2000:]}")
        finally:
            copy_log_tail(work, kit.out, key.replace("-", "_"))
        kit.write()
    kit.log("done")
    kit.write()


if __name__ == "__main__":
    main()
