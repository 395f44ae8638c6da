"""`embtrt up`, above the stages it joins (export, serve, scale): model folders or built repositories
in, one HTTP endpoint out, in one process group.

Each source that is a model folder is built (python-* targets: nothing to do on a GPU host first) into
a repository of its own, reused while it was built from the same weights with the same target; then one
tritonserver serves every repository under the `embtrt serve` supervisor (probes, restarts, drain), and
the gateway answers the HTTP routes in front of it on a thread of this process once the server is ready.
One Ctrl-C or SIGTERM stops the gateway (the requests in flight answered), then drains and stops the
server: nothing is left running.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import SpecError
from .repository.manifest import has_manifest, read_manifest

UP_TARGETS = ("python-ort", "python-openvino", "python-torch")
CACHE_ENV = "EMBTRT_CACHE"


def cache_root() -> Path:
    """Where `up` keeps the repositories it builds: $EMBTRT_CACHE, else $XDG_CACHE_HOME/embtrt, else
    ~/.cache/embtrt."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "embtrt"


def built_from(repo: Path) -> tuple[str | None, str | None]:
    """(sha256 of the weights, target) a repository records, (None, None) when it records none."""
    m = read_manifest(repo)
    return (m.extra.get("source") or {}).get("sha256"), m.target


def check_source(source: Path, out: Path | None, target: str, rebuild: bool) -> bool:
    """Whether `source` is a built repository (True) or a model folder `up` can build (False); a SpecError
    for anything else, before any work."""
    if has_manifest(source):
        if out is not None or rebuild:
            raise SpecError(f"{source} is a repository already: --out and --rebuild apply to model folders",
                            "pass the model folder to build it again")
        return True
    if not (source / "config.json").is_file() and not (source / "modules.json").is_file():
        raise SpecError(f"{source} is neither a repository written by embtrt build (no embtrt.json) nor a "
                        "model folder (no config.json)", "pass a Hugging Face / sentence-transformers model folder")
    if target not in (*UP_TARGETS, "auto"):
        raise SpecError(f"embtrt up builds {', '.join(UP_TARGETS)}, not {target}",
                        "for TensorRT: embtrt build --target tensorrt, embtrt engines on the GPU host, then "
                        "embtrt up REPOSITORY")
    return False


def repository_for(source: Path, out: Path | None, target: str, rebuild: bool, log: Callable[[str], None]) -> Path:
    """A repository to serve for `source`: itself when it is one; else the one `up` built from the same
    weights and target (at `out`, or in the cache named after the folder and its hash), built now when
    missing, stale or `rebuild`. A repository of other weights at an explicit `out` is never replaced
    without `rebuild`."""
    from .reference.modelinfo import model_hash

    source = Path(source)
    if check_source(source, out, target, rebuild):
        return source
    if target == "auto":
        target = up_target(source)
    sha = model_hash(source)
    dest = out or cache_root() / "repos" / f"{source.resolve().name}-{sha[:12]}-{target}"
    if has_manifest(dest) and not rebuild:
        have_sha, have_target = built_from(dest)
        if (have_sha, have_target) == (sha, target):
            log(f"reusing {dest}: built from these weights (sha256 {sha[:12]}) for {target}; --rebuild builds again")
            return dest
        if out is not None:
            raise SpecError(f"--out {dest} holds a repository of other weights or another target "
                            f"(sha256 {(have_sha or '?')[:12]}, {have_target}; this folder: {sha[:12]}, {target})",
                            "pass --rebuild to replace it, or another --out")
    from .export import build
    from .export.spec_options import spec_from_options

    log(f"building {source} into {dest} ({target})")
    build(spec_from_options(source, dest, target=target), force=True, log=log)
    return dest


def up_target(source: Path) -> str:
    """`--target auto`: python-ort, or the folder's kind's own first target where its build does not take python-ort
    (a page-image retriever: python-torch)."""
    from .reference.detect import detect

    own = detect(source).kind.targets
    return own[0] if own and UP_TARGETS[0] not in own else UP_TARGETS[0]


@dataclass
class UpSpec:
    sources: list[Path]
    host: str = "127.0.0.1"
    port: int = 8080
    grpc_port: int = 8001
    out: Path | None = None
    target: str = "auto"
    rebuild: bool = False
    api_key: str | None = None
    drain_grace_s: float = 5.0
    served_model_names: tuple[str, ...] = ()   # --served-model-name values (scale.gateway.config.parse_served_names)
    otlp_endpoint: str | None = None   # traces of the gateway, tritonserver and the front doors (serve/otel.py)
    trace_sample: float | None = None


def up(spec: UpSpec, log: Callable[[str], None] = print) -> None:
    """Build what needs building, serve it, put the gateway in front; return once stopped."""
    from .scale.gateway.config import GatewayConfig, parse_served_names
    from .scale.gateway.http import Background
    from .serve.otel import triton_args, triton_env
    from .serve.ports import refuse_taken, reserve
    from .serve.server import ServerSpec, free_port
    from .serve.supervise import Supervisor

    if spec.out is not None and len(spec.sources) > 1:
        raise SpecError("--out names one repository: it takes one model folder", "leave --out out for several")
    for s in spec.sources:   # what cannot be served, then taken ports: refused before any build
        check_source(Path(s), spec.out, spec.target, spec.rebuild)
    refuse_taken(spec.host, {"--port": spec.port, "--grpc-port": spec.grpc_port})
    reserve(spec.port, spec.grpc_port)   # not handed to tritonserver's other endpoints before they are bound
    port = spec.port or free_port(spec.host)
    repos = [repository_for(s, spec.out, spec.target, spec.rebuild, log) for s in spec.sources]
    names = parse_served_names(spec.served_model_names, [read_manifest(r).name for r in repos])
    server = ServerSpec(repository=repos[0], more_repositories=tuple(repos[1:]), host=spec.host,
                        grpc_port=spec.grpc_port or free_port(spec.host), http_port=free_port(spec.host),
                        metrics_port=free_port(spec.host), extra_args=triton_args(spec.otlp_endpoint, spec.trace_sample),
                        env=triton_env(spec.otlp_endpoint))
    gateway: list[Background] = []

    def ready(sup: Supervisor) -> None:
        srv = sup.server
        assert srv is not None
        cfg = GatewayConfig(repos[0], more_repositories=tuple(repos[1:]), triton=srv.grpc_url, api_key=spec.api_key,
                            served_names=names, otlp_endpoint=spec.otlp_endpoint, trace_sample=spec.trace_sample)
        g = Background(cfg, spec.host, port, log=log)
        g.start()
        gateway.append(g)
        public = dict((m, n[0]) for m, n in names)
        kinds = ", ".join(f"{public.get(m.name, m.name)} ({m.kind})" for m in (read_manifest(r) for r in repos))
        base = f"http://{spec.host}:{port}"
        log(f"ready: {base} serves {kinds}; OpenAI base_url {base}/v1; tritonclient gRPC {srv.grpc_url}; "
            f"Triton metrics {srv.metrics_url}; tritonserver log {srv.log_path}")

    def stop() -> None:
        if gateway:
            log("stopping the gateway: no new connections, the requests in flight answered")
            gateway[0].stop()

    Supervisor(server, log=log, health_port=None, drain_grace_s=spec.drain_grace_s, on_ready=ready,
               on_stop=stop).run()
