"""Find and run tritonserver on a repository: loopback by default, ready only when every model is.

The `nvidia-pytriton` wheel carries a tritonserver with the Python backend; its stub for
the running Python must sit next to the backend, and the stub must import the packages of
this environment (numpy, tokenizers, onnxruntime). We prepare both without touching
site-packages: a private backend folder of symlinks, and PATH/PYTHONPATH for the stub.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from embtrt_backend.liveness import http_status

from ..errors import ServerError
from ..repository.check import repositories_conflicts
from ..repository.manifest import has_manifest
from .drain import ENV as DRAIN_ENV, Drained, drain as drain_requests, marker
from .ports import free_port, group_pids, listening_pids, refuse_taken

__all__ = ["ServerSpec", "TritonServer", "free_port", "find_tritonserver", "stub_environment"]


@dataclass(frozen=True)
class ServerSpec:
    repository: Path
    host: str = "127.0.0.1"
    grpc_port: int = 8001
    http_port: int = 8000
    metrics_port: int = 8002
    tritonserver: Path | None = None
    backend_directory: Path | None = None
    log_file: Path | None = None
    startup_timeout_s: float = 180.0
    exit_timeout_s: int = 30
    # SIGTERM: after the grace period, new requests are refused (UNAVAILABLE) and in-flight ones get
    # at most this long to finish before tritonserver is stopped (serve.drain)
    drain_s: float = 10.0
    # False: stop() kills tritonserver at once (SIGKILL; the reaper then removes its stubs and their
    # shared memory) instead of letting it unload model by model, a second or more per Python model.
    # For servers whose callers have had every answer when they stop them: tests, measurements.
    graceful_exit: bool = True
    # Triton's config auto-complete: off, since every config embtrt writes is complete and with it on the
    # Python backend starts one more stub per model only to ask it for a config (MiniLM's repository ready
    # in 1.9 s instead of 4.3 s on 2 cores: docs/serving.md). True runs as a plain `tritonserver` would.
    auto_complete: bool = False
    extra_args: tuple[str, ...] = ()
    # Serve with this Python environment (a venv or prefix with bin/python3) instead of embtrt's
    # own: its bin/ first on PATH and none of embtrt's packages on PYTHONPATH, as a stock
    # tritonserver image runs the stubs with its own python3 (numpy only).
    python_env: Path | None = None
    # Serve only these models (--model-control-mode=explicit --load-model=...), e.g. one length
    # pool's encoders; None serves the whole repository.
    models: tuple[str, ...] | None = None
    # Further repositories served by the same tritonserver (several models, one per repository).
    more_repositories: tuple[Path, ...] = ()
    # Variables set in tritonserver's environment (and so its stubs'), e.g. the OTLP endpoint the front
    # door's spans go to (serve/otel.py)
    env: tuple[tuple[str, str], ...] = ()

    @property
    def repositories(self) -> tuple[Path, ...]:
        return (Path(self.repository), *map(Path, self.more_repositories))

    @property
    def ports(self) -> dict[str, int]:
        """Its ports by the flag that sets each (what a taken one is named by)."""
        return {"--grpc-port": self.grpc_port, "--http-port": self.http_port, "--metrics-port": self.metrics_port}


REAPER = Path(__file__).with_name("reaper.py")
MAX_LOG_BYTES = 64 << 20  # a server log past this is moved to LOG.1 when the server (re)starts


def _pytriton_root() -> Path | None:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0]) / "tritonserver"
    return root if (root / "bin" / "tritonserver").is_file() else None


@dataclass(frozen=True)
class Installation:
    binary: Path
    backend_directory: Path | None
    env: dict[str, str] = field(default_factory=dict)


def _pytriton_backends(root: Path) -> Path:
    """A private backends/ folder: the wheel's Python backend plus the stub for this Python."""
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / ver / "triton_python_backend_stub"
    if not stub.is_file():
        raise ServerError(f"the nvidia-pytriton wheel has no Python-backend stub for Python {ver}",
                          "use a Python the wheel supports (3.8-3.13) or pass --tritonserver")
    key = hashlib.sha256(f"{root}|{sys.executable}".encode()).hexdigest()[:12]
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "embtrt" / f"backends-{key}"
    py = base / "python"
    py.mkdir(parents=True, exist_ok=True)
    # Symlinks, not copies: the stub finds its libraries through an $ORIGIN-relative RPATH.
    for src in (root / "backends" / "python" / "libtriton_python.so",
                root / "backends" / "python" / "triton_python_backend_utils.py", stub):
        dst = py / src.name
        if dst.is_symlink() and Path(os.readlink(dst)) == src:
            continue
        tmp = py / f".{src.name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(src)
        tmp.replace(dst)
    return base


def find_tritonserver(explicit: Path | None = None, backend_directory: Path | None = None,
                      python_env: Path | None = None) -> Installation:
    """--tritonserver, else the nvidia-pytriton wheel's, else `tritonserver` on PATH."""
    env = stub_environment(python_env)
    if explicit is not None:
        if not Path(explicit).is_file():
            raise ServerError(f"--tritonserver {explicit} does not exist")
        return Installation(Path(explicit), backend_directory, env)
    root = _pytriton_root()
    if root is not None:
        libs = root.parent.parent / "nvidia_pytriton.libs"
        if libs.is_dir():
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p] + [str(libs)])
        return Installation(root / "bin" / "tritonserver", backend_directory or _pytriton_backends(root), env)
    found = shutil.which("tritonserver")
    if found:
        return Installation(Path(found), backend_directory, env)
    raise ServerError("no tritonserver found", "pip install 'embtrt[server]' (the nvidia-pytriton wheel carries one), "
                      "put tritonserver on PATH, or pass --tritonserver")


def stub_environment(python_env: Path | None = None) -> dict[str, str]:
    """PATH and PYTHONPATH so Python-backend stubs import this environment's packages (or, with
    python_env, only that environment's: the stub runs the first python3 on PATH)."""
    env = dict(os.environ)
    if python_env is None:
        bindir = str(Path(sys.executable).parent)
        paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
        paths += [p for p in sys.path if p.endswith("site-packages") or p.endswith("dist-packages")]
    else:
        bindir, paths = str(Path(python_env) / "bin"), []
        if not (Path(bindir) / "python3").exists():
            raise ServerError(f"--python-env {python_env} has no bin/python3")
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join([bindir] + [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bindir])
    seen = list(dict.fromkeys(paths + [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x]))
    if seen:
        env["PYTHONPATH"] = os.pathsep.join(seen)
    # The stub links libpython3.X from the system's loader path; when the running Python is a
    # different build (pyenv, conda), its stdlib extension modules do not match that library
    # (seen here: `import ssl` fails with "undefined symbol: _PyModule_Add", which breaks
    # transformers in a stub). Put this interpreter's own shared libpython first.
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir and (Path(libdir) / ldlib).exists():
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [libdir] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != libdir])
    env.setdefault("OMP_NUM_THREADS", "1")
    # OpenMP threads (PyTorch) that spin while idle steal the cores the server and the other
    # stubs need, as ONNX Runtime's spinning did (see embtrt_backend.encoder).
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def counters(metrics_url: str) -> tuple[float, float, float] | None:
    """(queued requests, successful requests, failed requests) summed over models; None when the
    metrics endpoint does not answer."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=2) as r:
            text = r.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    pending = ok = failed = 0.0
    for line in text.splitlines():
        if line.startswith("nv_inference_pending_request_count{"):
            pending += float(line.rsplit(" ", 1)[1])
        elif line.startswith("nv_inference_request_success{"):
            ok += float(line.rsplit(" ", 1)[1])
        elif line.startswith("nv_inference_request_failure{"):
            failed += float(line.rsplit(" ", 1)[1])
    return pending, ok, failed


class TritonServer:
    """A tritonserver child process. Use as a context manager; it is always stopped."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.proc: subprocess.Popen | None = None
        self.install = find_tritonserver(spec.tritonserver, spec.backend_directory, spec.python_env)
        self._log_fh: IO[bytes] | None = None
        self.log_path = spec.log_file
        self._temp_log = False   # a log start() made in the temporary folder: removed after a clean exit
        self._run_dir: Path | None = None   # the drain marker's folder (serve.drain), made by start()
        self.drained: Drained | None = None

    @property
    def grpc_url(self) -> str:
        return f"{self.spec.host}:{self.spec.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.spec.host}:{self.spec.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.spec.host}:{self.spec.metrics_port}/metrics"

    def command(self) -> list[str]:
        s = self.spec
        cmd = [
            str(self.install.binary),
            *(f"--model-repository={r.resolve()}" for r in s.repositories),
            f"--grpc-address={s.host}", f"--grpc-port={s.grpc_port}",
            f"--http-address={s.host}", f"--http-port={s.http_port}",
            f"--metrics-address={s.host}", f"--metrics-port={s.metrics_port}",
            "--allow-metrics=true", "--allow-gpu-metrics=false",
            "--strict-readiness=true", "--exit-on-error=true",
            *(() if s.auto_complete else ("--disable-auto-complete-config",)),
            f"--exit-timeout-secs={s.exit_timeout_s}",
            "--backend-config=python,shm-growth-byte-size=16777216",
            "--log-verbose=0",
        ]
        if self.install.backend_directory is not None:
            cmd.append(f"--backend-directory={self.install.backend_directory}")
        if s.models is not None:
            cmd += ["--model-control-mode=explicit"] + [f"--load-model={m}" for m in s.models]
        return cmd + list(s.extra_args)

    def _refuse_missing_backends(self) -> None:
        """A repository whose models run on a backend the server's backend directory lacks is refused
        before the start (tritonserver would fail with "failed to load all models", the cause in its log).
        Checked where the backend directory is known (the nvidia-pytriton wheel's has Python only)."""
        from ..repository.config import backends_needed

        where = self.install.backend_directory
        if where is None:
            return
        have = sorted(p.name for p in Path(where).iterdir() if p.is_dir())
        for repo in self.spec.repositories:
            for backend, models in backends_needed(repo).items():
                if backend not in have:
                    raise ServerError(
                        f"{repo} needs Triton's {backend} backend (models {', '.join(models)}), which this "
                        f"tritonserver does not have (its backends in {where}: {', '.join(have) or 'none'})",
                        "serve it with a tritonserver that has it (the NGC image nvcr.io/nvidia/tritonserver, or "
                        "--tritonserver and --backend-directory), or build it with --target python-ort "
                        "(ONNX Runtime inside the Python backend)")

    def start(self) -> "TritonServer":
        for repo in self.spec.repositories:
            if not has_manifest(repo) and not any(Path(repo).glob("*/config.pbtxt")):
                raise ServerError(f"{repo} is not a model repository", "run `embtrt build` first")
        if len(self.spec.repositories) > 1:
            problems = repositories_conflicts(self.spec.repositories)
            if problems:
                raise ServerError("these repositories cannot be served together: " + "; ".join(problems),
                                  "rebuild one with another --name, or with the same --server-python")
        self._refuse_missing_backends()
        s = self.spec
        refuse_taken(s.host, s.ports)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="embtrt-tritonserver-", suffix=".log")
            os.close(fd)
            self.log_path, self._temp_log = Path(name), True
        elif Path(self.log_path).is_file() and Path(self.log_path).stat().st_size > MAX_LOG_BYTES:
            Path(self.log_path).replace(Path(f"{self.log_path}.1"))
        self._log_fh = open(self.log_path, "ab")
        if self._run_dir is None:
            self._run_dir = Path(tempfile.mkdtemp(prefix="embtrt-run-"))
        env = {**self.install.env, **dict(self.spec.env), DRAIN_ENV: str(self.drain_flag)}
        # tritonserver under the reaper, in a session of its own: it dies with this process (even on
        # SIGKILL), and when it exits its stubs and their /dev/shm regions go with it
        self.proc = subprocess.Popen([sys.executable, str(REAPER), str(os.getpid()), "--", *self.command()],
                                     stdout=self._log_fh, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        return self

    def pids(self) -> set[int]:
        """The server's processes: the reaper, tritonserver and its Python stubs."""
        return group_pids(self.proc.pid) if self.proc is not None and self.proc.poll() is None else set()

    def server_pid(self) -> int | None:
        """tritonserver's own process (the reaper's child), while it runs."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def owns_ports(self) -> bool:
        """Whether the gRPC and HTTP ports are held by this server's own processes (not an orphan's)."""
        mine = self.pids()
        return bool(mine) and all(listening_pids(p, mine) for p in (self.spec.grpc_port, self.spec.http_port))

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = Path(self.log_path).read_text(errors="replace").splitlines()  # type: ignore[arg-type]
        except (OSError, TypeError):
            return ""
        return "\n".join(lines[-n:])

    def _get(self, path: str, timeout: float = 2.0) -> int:
        return http_status(self.http_url + path, timeout)

    def model_names(self) -> list[str]:
        if self.spec.models is not None:
            return sorted(self.spec.models)
        return sorted(p.parent.name for repo in self.spec.repositories for p in Path(repo).glob("*/config.pbtxt"))

    def wait_ready(self, timeout_s: float | None = None, should_stop=None) -> None:
        """Until every model is ready and the answering server is this one; `should_stop()` true
        interrupts the wait (SIGTERM during a start or a recovery)."""
        deadline = time.time() + (timeout_s or self.spec.startup_timeout_s)
        while time.time() < deadline:
            if should_stop is not None and should_stop():
                raise ServerError("interrupted while waiting for tritonserver to be ready")
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerError(f"tritonserver exited with code {self.proc.returncode} during start-up:\n"
                                  f"{self.log_tail()}", f"full log: {self.log_path}")
            if self._get("/v2/health/ready") == 200 and all(
                    self._get(f"/v2/models/{m}/ready") == 200 for m in self.model_names()):
                if not self.owns_ports():  # something else answers on our port: never report it as ours
                    raise ServerError(f"a server that is not this one answers on {self.grpc_url} / {self.http_url}",
                                      "stop it (an orphaned tritonserver?) or pick other ports")
                return
            time.sleep(0.1)   # one GET per poll until the server says ready
        raise ServerError(f"tritonserver was not ready after {timeout_s or self.spec.startup_timeout_s:.0f} s:\n"
                          f"{self.log_tail()}", f"full log: {self.log_path}")

    @property
    def drain_flag(self) -> Path:
        """The file whose existence makes the entry models refuse new requests (serve.drain)."""
        assert self._run_dir is not None, "start() first"
        return marker(self._run_dir)

    def activity(self) -> tuple[float, float] | None:
        """(pending requests, finished requests) summed over models, from the metrics endpoint."""
        c = counters(self.metrics_url)
        return None if c is None else (c[0], c[1] + c[2])

    def stop(self, timeout_s: float | None = None, drain: bool = False, grace_s: float = 0.0,
             kill: bool | None = None) -> int | None:
        """Stop tritonserver. drain: serve `grace_s` longer, refuse new requests and let the ones in
        flight finish (serve.drain), then kill it; when they outlast spec.drain_s, or without drain on a
        graceful_exit server, SIGTERM (tritonserver's own shutdown), SIGKILL after the exit timeout.
        kill: SIGKILL at once (None: unless spec.graceful_exit), as for a broken server restarted.
        Returns once no process of the server's group is left (its ports and memory let go)."""
        if self.proc is None:
            return None
        kill = not self.spec.graceful_exit if kill is None else kill
        if drain and self.proc.poll() is None:
            self.drained = drain_requests(self.drain_flag, grace_s, self.spec.drain_s)
            kill = kill or self.drained.idle
        if kill and self.proc.poll() is None:
            self._kill_server()
        if self.proc.poll() is None:
            # SIGTERM to tritonserver alone: its Python stubs share the process group and must
            # keep running until the server has drained in-flight requests and unloaded them.
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s if timeout_s is not None else self.spec.exit_timeout_s + 10)
            except subprocess.TimeoutExpired:
                self._kill_server()
        # Stubs run in the server's process group; make sure none outlives it, and return only when
        # the group is gone: a killed tritonserver keeps its sockets until it has let go of its memory
        # (seconds for a loaded one), and a restart on the same ports would find them taken.
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while group_pids(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._log_fh:
            self._log_fh.close()
            self._log_fh = None
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None
        return self.proc.returncode

    def _kill_server(self) -> None:
        """SIGKILL tritonserver; the reaper sees it exit, removes its stubs and their shared memory,
        and exits (the group is SIGKILLed after a bounded wait if it does not)."""
        assert self.proc is not None
        pid = self.server_pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)

    def __enter__(self) -> "TritonServer":
        from .launch import launch

        try:
            launch(self)   # start and wait until ready; once more after Triton's own transient abort
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop()
        if exc_type is None and self._temp_log and self.log_path is not None:
            # nothing went wrong: a log no one asked for is not left behind (a failure keeps it, and
            # its message names it)
            Path(self.log_path).unlink(missing_ok=True)
