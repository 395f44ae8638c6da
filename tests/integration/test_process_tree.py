"""`embtrt serve`'s process tree (#29): it cannot outlive its parent, impersonate another server, or
leak stubs and shared memory; it tells a dead server from a busy one. Real tritonservers on
127.0.0.1, free ports; every wait is bounded and synchronised on observed state, never a sleep."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from embtrt.serve.client import EmbeddingClient
from embtrt.serve.ports import group_pids
from embtrt.serve.server import free_port
from waiting import until

pytestmark = pytest.mark.integration
MODEL = "all_minilm_l6_v2"
TINY = "xlmr_mean"
EMBTRT = str(Path(sys.executable).parent / "embtrt")


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _stubs(pids: set[int]) -> dict[int, list[str]]:
    out = {}
    for p in pids:
        try:
            argv = [a.decode() for a in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if argv and argv[0].endswith("triton_python_backend_stub"):
            out[p] = argv
    return out


def _regions(stubs: dict[int, list[str]]) -> set[Path]:
    return {Path("/dev/shm") / a for argv in stubs.values() for a in argv if a.startswith("triton_python_backend_shm")}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


class Serve:
    """`embtrt serve REPO` as a user runs it, in its own session; the group is killed at the end."""

    def __init__(self, repo: Path, tmp: Path, *args: str) -> None:
        self.grpc, self.http, self.metrics = free_port(), free_port(), free_port()
        self.log = tmp / f"serve-{self.grpc}.log"
        self.proc = subprocess.Popen([EMBTRT, "serve", str(repo), "--grpc-port", str(self.grpc), "--http-port",
                                      str(self.http), "--metrics-port", str(self.metrics), "--health-port", "0",
                                      "--log-file", str(tmp / f"tritonserver-{self.grpc}.log"), *args],
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text()

    def ready(self, timeout_s: float = 180) -> "Serve":
        until(lambda: "ready: model" in self.text() or self.proc.poll() is not None, timeout_s, "serve ready")
        assert self.proc.poll() is None, self.text()
        return self

    def server_group(self) -> set[int]:
        reaper = [c for c in _children(self.proc.pid)]
        assert len(reaper) == 1, reaper
        return group_pids(reaper[0])

    def close(self) -> None:
        """SIGKILL of serve alone, as test_sigkill_of_serve_... does (its reaper kills the server and
        removes the stubs' shared memory; a graceful SIGTERM would unload model by model, 5 s), a
        bounded wait for the group to go, then SIGKILL whatever is left: a group killed at once
        would leave the dead server's /dev/shm regions."""
        kids = _children(self.proc.pid)
        group = {p for k in kids for p in group_pids(k)} if kids else set()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in group) and time.monotonic() < deadline:
            time.sleep(0.1)
        for p in [self.proc.pid, *kids]:
            try:
                os.killpg(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait(timeout=30)


def _serving(repo: Path, tmp_path: Path):
    made: list[Serve] = []

    def start(*args: str) -> Serve:
        s = Serve(repo, tmp_path, *args)
        made.append(s)
        return s

    yield start
    for s in made:
        s.close()


@pytest.fixture()
def serve(minilm_repo, tmp_path):
    """`embtrt serve` of MiniLM's default repository (the busy-server case needs its real load)."""
    yield from _serving(minilm_repo, tmp_path)


@pytest.fixture()
def serve_tiny(tiny_repos, tmp_path):
    """`embtrt serve` of the tiny XLM-R repository (model xlmr_mean: a front door, three buckets'
    tokenizers and encoders, the Python-backend pooler): the same process tree as MiniLM's, ready
    sooner. (Not tiny bert-cls: test_reproducible_build compares that one before anything serves it.)"""
    yield from _serving(tiny_repos["xlmr-mean"], tmp_path)


def test_serve_refuses_the_ports_already_taken_naming_them_all_at_once(minilm_repo):
    """#73: every taken port in one refusal (the health port among them), each with its holder; nothing
    started, so no stopping or exit lines."""
    with socket.socket() as held, socket.socket() as held2:
        for h in (held, held2):
            h.bind(("127.0.0.1", 0))
            h.listen(1)
        port, port2 = held.getsockname()[1], held2.getsockname()[1]
        r = subprocess.run([EMBTRT, "serve", str(minilm_repo), "--grpc-port", str(port), "--http-port", str(free_port()),
                            "--metrics-port", str(free_port()), "--health-port", str(port2), "--probe-interval", "0"],
                           capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert (f"ports {port} (--grpc-port, held by process {os.getpid()}); {port2} (--health-port, held by process "
            f"{os.getpid()}) on 127.0.0.1 are already in use") in " ".join(out.split()), out
    assert "ready" not in r.stdout and "stopping" not in out and "exited with code" not in out, out


def test_sigkill_of_serve_leaves_no_tritonserver_stub_or_shared_memory(serve_tiny):
    s = serve_tiny("--probe-interval", "0").ready()
    group = s.server_group()
    stubs = _stubs(group)
    regions = _regions(stubs)
    assert len(stubs) >= 4 and regions and all(r.exists() for r in regions)
    env = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{min(group)}/environ").read_bytes().split(b"\0") if b"=" in kv)
    run_dir = Path(env[b"EMBTRT_DRAIN_FILE"].decode()).parent   # serve's drain-marker folder
    assert run_dir.name.startswith("embtrt-run-") and run_dir.is_dir()
    os.kill(s.proc.pid, signal.SIGKILL)
    until(lambda: not any(_alive(p) for p in group), 60, f"every process of {sorted(group)} gone")
    until(lambda: not any(r.exists() for r in regions), 10, "the stubs' /dev/shm regions removed")
    assert not run_dir.exists()   # the orphaned reaper removed it too


def test_a_killed_tritonserver_is_noticed_at_once_and_leaves_nothing(serve_tiny):
    s = serve_tiny("--probe-interval", "0").ready()
    group = s.server_group()
    stubs = _stubs(group)
    regions = _regions(stubs)
    triton = next(p for p in group if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].endswith(b"tritonserver"))
    os.kill(triton, signal.SIGKILL)
    until(lambda: not any(_alive(p) for p in stubs), 30, "the dead server's stubs gone")
    until(lambda: not any(r.exists() for r in regions), 10, "its /dev/shm regions removed")
    until(lambda: "recovered in" in s.text(), 180, "a recovery with --probe-interval 0")
    assert "tritonserver exited with code 137" in s.text()
    with EmbeddingClient(f"127.0.0.1:{s.grpc}", TINY) as c:
        assert np.isfinite(c.embed(["served again after the crash"])).all()


def test_a_dead_stub_is_found_by_liveness_without_an_inference_probe(serve_tiny):
    s = serve_tiny("--probe-interval", "0").ready()
    stubs = _stubs(s.server_group())
    victim = next(p for p, argv in stubs.items() if argv[-2] == f"{TINY}_0_0")
    os.kill(victim, signal.SIGKILL)
    until(lambda: "recovered in" in s.text(), 180, "a recovery after the stub's death")
    assert f"the Python-backend stub of {TINY}_0_0 is not running" in s.text()
    with EmbeddingClient(f"127.0.0.1:{s.grpc}", TINY) as c:
        assert np.isfinite(c.embed(["served again after the stub died"])).all()


@pytest.mark.slow  # a server of its own; the benchmarks' pause (run_rerank.sh, bench --triton-pid) uses it too
def test_a_paused_tritonserver_is_left_alone_and_not_ready_until_it_continues(serve):
    """SIGSTOP of the server's process group (as `embtrt bench --triton-pid` pauses a server while it
    measures another): liveness calls it paused, not dead; nothing restarts; /ready is 503 while
    it is stopped and 200 after SIGCONT, and it serves."""
    import urllib.error
    import urllib.request

    s = serve("--probe-interval", "0").ready()
    port = int(next(line.split(":")[-1].split("/")[0] for line in s.text().splitlines() if "health  http" in line))

    def ready() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def checks() -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/live", timeout=5) as r:
            return int(json.loads(r.read())["checks"])

    triton = next(p for p in s.server_group() if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].endswith(b"tritonserver"))
    pg = os.getpgid(triton)
    assert ready() == 200
    os.killpg(pg, signal.SIGSTOP)
    try:
        until(lambda: "paused, not restarted" in s.text(), 10, "the pause noticed")
        paused_at = checks()
        until(lambda: checks() >= paused_at + 3, 60, "three more liveness checks while stopped")
        assert ready() == 503
    finally:
        os.killpg(pg, signal.SIGCONT)
    until(lambda: "continues (SIGCONT)" in s.text(), 10, "the continue noticed")
    assert "recovering" not in s.text() and ready() == 200
    with EmbeddingClient(f"127.0.0.1:{s.grpc}", MODEL) as c:
        assert np.isfinite(c.embed(["served after the pause"])).all()


@pytest.mark.slow   # a large request keeping MiniLM busy past the probe: make test-all
def test_a_busy_server_whose_probe_times_out_is_not_restarted(serve, corpus):
    """A large legal request keeps the front door busy past the probe's deadline: the probe fails,
    the server is busy, nothing is restarted, and the large request is answered."""
    s = serve("--probe-interval", "0.5", "--probe-timeout", "0.5", "--failures-to-recover", "1").ready()
    long = " ".join(corpus[:12])
    texts = [long] * 32
    done: list = []

    def big() -> None:
        with EmbeddingClient(f"127.0.0.1:{s.grpc}", MODEL, batch_size=32, timeout_s=300) as c:
            done.append(c.embed(texts))

    import threading

    errors: list[BaseException] = []

    def run() -> None:
        try:
            big()   # 32 x 256 tokens per thread: some 10 probe deadlines on 2 cores
        except BaseException as exc:  # collected, not swallowed
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]  # both front-door instances busy, one queued
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    assert len(done) == 3 and all(np.isfinite(d).all() for d in done)
    log = s.text()
    assert "while the server is busy" in log, log
    assert "recovering" not in log, log


def test_a_server_stopped_without_a_graceful_exit_leaves_no_process_or_shared_memory(tiny_repos, tmp_path):
    """graceful_exit=False (the tests' and measurements' servers): stop() kills tritonserver at once
    instead of letting it unload model by model; the reaper still removes every stub and its /dev/shm
    region, and the server's ports are free again."""
    from embtrt.serve.server import ServerSpec, TritonServer

    spec = ServerSpec(tiny_repos["xlmr-mean"], grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                      log_file=tmp_path / "tritonserver.log", graceful_exit=False)
    srv = TritonServer(spec).__enter__()
    group = srv.pids()
    stubs = _stubs(group)
    regions = _regions(stubs)
    assert len(stubs) >= 4 and regions and all(r.exists() for r in regions)
    srv.__exit__(None, None, None)
    assert srv.proc.returncode is not None
    until(lambda: not any(_alive(p) for p in group), 30, f"every process of {sorted(group)} gone")
    until(lambda: not any(r.exists() for r in regions), 10, "the stubs' /dev/shm regions removed")
    assert "successfully unloaded" not in (tmp_path / "tritonserver.log").read_text()   # no per-model unload
    for port in (spec.grpc_port, spec.http_port):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))


def test_serve_refuses_at_once_a_repository_whose_backend_its_server_lacks(tiny_models, tmp_path):
    """#73: an onnxruntime-target repository builds here, but the bundled tritonserver has the Python
    backend only: refused before the start, naming the backend and what to do (was: "failed to load all
    models" with the cause in the log)."""
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    repo = tmp_path / "ort"
    build(spec_from_options(tiny_models["bert-cls"], repo, name="bert_ort", target="onnxruntime"), log=lambda _m: None)
    r = subprocess.run([EMBTRT, "serve", str(repo), "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0",
                        "--health-port", "-1", "--probe-interval", "0"], capture_output=True, text=True, timeout=120)
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode != 0 and "needs Triton's onnxruntime backend (models bert_ort_32_encoder" in out, out
    # refused before any start: no tritonserver ran, so nothing was stopped
    assert "build it with --target python-ort" in out and "ready" not in r.stdout and "stopping" not in out, out
