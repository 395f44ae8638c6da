"""Liveness of a tritonserver serving embtrt repositories: process and stub health, never an inference.

    python3 liveness.py --http 127.0.0.1:8000 --repository /models [--repository ...]

Live means: Triton's /v2/health/live answers 200, and every Python-backend model instance of every
loaded (ready) model has its stub process alive. Triton's own endpoints stay 200 after a stub dies
(every request then fails with "Stub process ... is not healthy"), so the stubs are looked up in
/proc: each stub's command line names its instance (`MODEL_<group>_<instance>`). Nothing here
queues behind user traffic, so a busy server is never called dead. Standard library only: the
supervisor (`embtrt serve`) imports it, and a pool image runs it as its liveness command from the
repository itself. Exit 0 when live, 1 with the reasons on stderr otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import urllib.error
import urllib.request

_NAME = re.compile(r'^\s*name:\s*"([^"]+)"', re.M)
_BACKEND = re.compile(r'^\s*backend:\s*"([^"]+)"', re.M)
_GROUP = re.compile(r"instance_group\s*\[(.*?)\n\]", re.S)
_COUNT = re.compile(r"count:\s*(\d+)")


def python_instances(repositories: list[str]) -> dict[str, list[str]]:
    """{model: [instance names]} of every Python-backend model in the repositories' config.pbtxt files
    (instance names as Triton gives them: MODEL_<group index>_<instance index>)."""
    out: dict[str, list[str]] = {}
    for repo in repositories:
        for entry in sorted(os.listdir(repo)):
            path = os.path.join(repo, entry, "config.pbtxt")
            if not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            backend = _BACKEND.search(text)
            if not backend or backend.group(1) != "python":
                continue
            name_m = _NAME.search(text)
            name = name_m.group(1) if name_m else entry
            group = _GROUP.search(text)
            # one group entry per '{' block; count defaults to 1 (Triton's default for CPU)
            blocks = re.findall(r"\{(.*?)\}", group.group(1), re.S) if group else [""]
            names = []
            for g, block in enumerate(blocks):
                c = _COUNT.search(block)
                names += [f"{name}_{g}_{i}" for i in range(int(c.group(1)) if c else 1)]
            out[name] = names
    return out


def live_stubs(pids: set[int] | None = None) -> dict[str, int]:
    """{instance name: pid} of the Python-backend stub processes running (optionally only among pids)."""
    out: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or (pids is not None and int(entry) not in pids):
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        args = [a.decode("utf-8", "replace") for a in argv if a]
        if state in ("Z", "X") or len(args) < 3 or not args[0].endswith("triton_python_backend_stub"):
            continue
        # argv (Triton 2.4x-2.5x): stub model.py shm_region shm_default shm_growth parent_pid backend_dir
        # ipc_size INSTANCE RUNTIME_MODE
        out[args[-2]] = int(entry)
    return out


def http_status(url: str, timeout_s: float) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, OSError):
        return 0


def check(http: str, repositories: list[str], timeout_s: float = 2.0, pids: set[int] | None = None) -> list[str]:
    """The reasons the server is not live ([] when it is). `pids`: only these processes count as its stubs."""
    base = http if http.startswith("http") else f"http://{http}"
    code = http_status(f"{base}/v2/health/live", timeout_s)
    if code != 200:
        return [f"tritonserver's /v2/health/live answered {code or 'nothing'}"]
    running = live_stubs(pids)
    problems = []
    for model, instances in python_instances(repositories).items():
        missing = [i for i in instances if i not in running]
        if missing and http_status(f"{base}/v2/models/{model}/ready", timeout_s) == 200:
            problems.append(f"{model}: the Python-backend stub of {', '.join(missing)} is not running")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Liveness of a tritonserver: process and stub health, no inference.")
    ap.add_argument("--http", default="127.0.0.1:8000", help="Triton's HTTP address. Default 127.0.0.1:8000.")
    ap.add_argument("--repository", action="append", required=True, help="A model repository it serves; repeatable.")
    ap.add_argument("--timeout", type=float, default=2.0, help="Seconds per HTTP call. Default 2.")
    args = ap.parse_args(argv)
    problems = check(args.http, args.repository, args.timeout)
    for p in problems:
        print(f"not live: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
