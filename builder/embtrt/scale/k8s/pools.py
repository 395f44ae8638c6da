"""One model's length pools: per pool a tritonserver Deployment, its Service, HPA and PDB."""

from __future__ import annotations

from pathlib import Path


from ...errors import SpecError
from ...repository.manifest import Manifest
from .pods import add_gi, container_security, image_fields, pod_spec, repository_size, resources, scratch, tls_volume, workload
from .spec import GRPC, HTTP, METRICS, QUEUE_METRIC, K8sSpec

# Triton's APIs that nothing of embtrt calls on a pool (the gateway infers; kubelet asks health):
# loading / unloading models, logging settings, shared-memory regions, tracing. They answer only a
# request with the admin header, whose value is in the admin Secret.
RESTRICTED = ("model-repository", "logging", "shared-memory", "trace")
ADMIN_HEADER = "embtrt-triton-admin-key"
ADMIN_ENV = "EMBTRT_TRITON_ADMIN_KEY"
TLS_DIR = "/etc/embtrt/tls"
# The root filesystem is read-only and /tmp the writable scratch: what a Python model writes under
# HOME (transformers' copy of a trusted model's own code, caches) goes there, and nothing reaches
# for the Hugging Face Hub (a pool loads only the repository's files; it reaches no network but the gateway's).
WRITABLE_ENV = (("HOME", "/tmp"), ("HF_HOME", "/tmp/huggingface"), ("HF_HUB_OFFLINE", "1"),
                ("TRANSFORMERS_OFFLINE", "1"))


# A terminating pod's drain (docs/reliability.md): preStop keeps serving for the grace while the
# endpoints and the gateway move away, then touches DRAIN_FILE (the pool's Python models refuse new
# requests with UNAVAILABLE from then on, never "unknown model"), then waits at most
# DRAIN_WAIT_S for the calls they are running; only then does kubelet send tritonserver SIGTERM.
DRAIN_ENV, DRAIN_FILE, DRAIN_WAIT_S = "EMBTRT_DRAIN_FILE", "/tmp/embtrt-drain", 30
TRITON_EXIT_S = 30   # tritonserver's --exit-timeout-secs (its default), after SIGTERM


def pre_stop(grace_s: int) -> list[str]:
    """The preStop command: sleep the grace, raise the drain flag, wait until every living Python model
    instance of the pod (not one of a container since restarted: its start time) has acknowledged it
    (DRAIN_FILE.seen, beside its registration in DRAIN_FILE.instances: embtrt_backend.drain) and none
    lists a call in flight (DRAIN_FILE.busy), or DRAIN_WAIT_S passed."""
    polls = DRAIN_WAIT_S * 10
    f = f"${DRAIN_ENV}"
    # u: an instance registered, not acknowledged, alive (not a zombie) and started when it said (/proc's 22nd field)
    unseen = (f'u() {{ for n in $(ls "{f}.instances" 2>/dev/null); do [ -e "{f}.seen/$n" ] && continue; '
              f's=$(sed "s/.*) //" "/proc/${{n%%-*}}/stat" 2>/dev/null); [ -n "$s" ] || continue; set -- $s; '
              f'[ "$1" = Z ] && continue; shift 19; w=$(cat "{f}.instances/$n" 2>/dev/null); '
              f'[ -z "$w" ] || [ "$w" = "$1" ] && return 0; done; return 1; }}; ')
    return ["sh", "-c", f'sleep {grace_s}; touch "{f}"; {unseen}i=0; '
                        f'while [ "$i" -lt {polls} ] && {{ u || [ -n "$(ls -A "{f}.busy" 2>/dev/null)" ]; }}; '
                        f'do sleep 0.1; i=$((i+1)); done']


def start_command() -> list[str]:
    """The pool container's command, before tritonserver's args: the drain's files cleared, then tritonserver.
    They lie on the /tmp emptyDir, which outlives a container restarted in its pod (a failed liveness probe also
    runs the preStop): a flag left behind would have the new container's models refuse every request, and a
    registration or acknowledgement left behind would name a pid the new container's processes may reuse."""
    f = f"${DRAIN_ENV}"
    return ["sh", "-c", f'rm -rf "{f}" "{f}.busy" "{f}.seen" "{f}.instances"; exec tritonserver "$@"', "tritonserver"]


def termination_grace_s(grace_s: int) -> int:
    """kubelet's bound on the whole stop: the preStop (grace, flag, wait) and tritonserver's exit."""
    return grace_s + 1 + DRAIN_WAIT_S + TRITON_EXIT_S + 5


def writable_env() -> list[dict]:
    """WRITABLE_ENV as a container's env entries (fresh dicts per container: YAML would alias shared ones)."""
    return [{"name": k, "value": v} for k, v in WRITABLE_ENV]


def plan_pools(buckets: list[int], pools: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Split the buckets into pools by their upper edges (each pool: the buckets above the last edge)."""
    edges = sorted(set(pools)) if pools else list(buckets)
    bad = [e for e in edges if e not in buckets]
    if bad:
        raise SpecError(f"invalid --pools {','.join(map(str, pools))}: {bad} are not buckets",
                        f"the buckets are {','.join(map(str, buckets))}")
    if edges[-1] != buckets[-1]:
        edges.append(buckets[-1])
    out, lo = [], 0
    for e in edges:
        out.append(tuple(b for b in buckets if lo < b <= e))
        lo = e
    return out


def pool_models(m: Manifest, buckets: tuple[int, ...]) -> list[str]:
    """The models one pool loads: an embedder's bucket models (encoder, tokenizer, ensemble, pooler);
    for a reranker or sparse encoder the front door, which tokenizes every bucket and runs it itself
    or (encoder_mode bls) through the bucket encoder models it calls."""
    if not m.model_kind.length_pools:
        return [m.name, *m.models.encoders]
    models = [x for b in buckets for x in (f"{m.name}_{b}_encoder", f"{m.name}_{b}_tokenizer", f"{m.name}_{b}")]
    if m.pooler == "python":
        models += [f"{m.name}_{b}_pooler" for b in buckets]
    return models


def liveness_script(repo: Path, models: list[str]) -> str:
    """The path, inside the pod's /models, of the stdlib liveness checker a loaded Python-backend
    model of this pool carries (every built repository has one per Python model)."""
    for m in models:
        if (Path(repo) / m / "1" / "embtrt_backend" / "liveness.py").is_file():
            return f"/models/{m}/1/embtrt_backend/liveness.py"
    raise SpecError(f"{repo}: none of the pool's models {', '.join(models)} carries 1/embtrt_backend/liveness.py",
                    "rebuild the repository with this embtrt (`embtrt build`): its Python models carry the checker")


def triton_args(models: list[str], tls: bool) -> list[str]:
    args = ["--model-repository=/models", "--model-control-mode=explicit", "--strict-readiness=true",
            "--disable-auto-complete-config",   # embtrt's configs are complete (one stub per model, not two)
            f"--http-port={HTTP}", f"--grpc-port={GRPC}", f"--metrics-port={METRICS}", "--exit-on-error=true",
            # kubelet expands $(VAR) from the container's env (the admin Secret)
            f"--http-restricted-api={','.join(RESTRICTED)}:{ADMIN_HEADER}=$({ADMIN_ENV})",
            f"--grpc-restricted-protocol={','.join(RESTRICTED)}:{ADMIN_HEADER}=$({ADMIN_ENV})"]
    if tls:
        args += ["--grpc-use-ssl=true", f"--grpc-server-cert={TLS_DIR}/tls.crt", f"--grpc-server-key={TLS_DIR}/tls.key"]
    return args + [f"--load-model={x}" for x in models]


def trace_args(spec: K8sSpec) -> list[str]:
    """tritonserver's OpenTelemetry trace mode to the spec's endpoint (serve/otel.py: what `embtrt serve
    --otlp-endpoint` passes), continuing the gateway's traceparent."""
    from ...serve.otel import trace_config

    return [] if spec.otlp_endpoint is None else list(trace_config(spec.otlp_endpoint, spec.trace_sample))


def trace_env(spec: K8sSpec) -> list[dict]:
    """The endpoint in the pool's environment too: a front door's stage spans (python_backend tracing), where
    the image's Python has the OpenTelemetry SDK."""
    from ...serve.otel import ENDPOINT_ENV

    return [] if spec.otlp_endpoint is None else [{"name": ENDPOINT_ENV, "value": spec.otlp_endpoint}]


def wants_gpu(m: Manifest) -> bool:
    """Does a pool of this repository need a GPU: TensorRT plans, or an encoder built for --device cuda
    (python-torch, onnxruntime)?"""
    spec = m.spec or {}
    return m.target == "tensorrt" or spec.get("device") == "cuda" or spec.get("ort_device") == "gpu"   # (older manifests)


def model_pools(spec: K8sSpec, repo: Path, m: Manifest, app: str, pvc: str, common: dict, files: dict,
                several: bool, admin_secret: str) -> list[str]:
    """One model's length pools into `files`; returns the gateway's --pool arguments."""
    name, buckets, tensorrt = m.name, list(m.buckets), m.target == "tensorrt"
    pool_args: list[str] = []
    try:
        pools = plan_pools(buckets, spec.pools)
    except SpecError as exc:
        raise SpecError(f"{name}: {exc.message}", exc.hint) from None
    if not m.model_kind.length_pools:
        # a reranker's or sparse encoder's front door plans every bucket itself (and runs it, or calls
        # its bucket encoders), so all of its buckets are in one pool (the gateway takes no other split for these kinds)
        if len(pools) > 1 and spec.pools:
            raise SpecError(f"{name}: invalid --pools {','.join(map(str, spec.pools))} for a {m.kind}: its front door "
                            "runs every bucket itself, so it is served by one pool",
                            "leave out --pools for this repository (or give its largest bucket only)")
        pools = [tuple(buckets)]
    models_size = repository_size(repo)
    for bs in pools:
        pool = f"{app}-pool-{max(bs)}"
        labels = {**common, "app.kubernetes.io/name": pool, "app.kubernetes.io/component": "triton-pool",
                  "embtrt.io/pool": str(max(bs))}
        models = pool_models(m, bs)
        init = [{
            "name": "copy-repository", **image_fields(spec.image),
            "command": ["sh", "-c", "cp -a /repository/. /models/"],
            "volumeMounts": [{"name": "repository", "mountPath": "/repository", "readOnly": True},
                             {"name": "models", "mountPath": "/models"}],
            "securityContext": container_security(), "resources": resources("500m", "1Gi", scratch="1Gi"),
        }]
        if tensorrt:
            init.append({
                "name": "engines", **image_fields(spec.engines_image or spec.image),
                "command": ["embtrt", "engines", "/models"],
                "env": writable_env(),
                "volumeMounts": [{"name": "models", "mountPath": "/models"}, {"name": "tmp", "mountPath": "/tmp"}],
                "securityContext": container_security(), "resources": resources("2", "8Gi", spec.gpus, scratch="1Gi"),
            })
        live = ["python3", "-I", "-B", liveness_script(repo, models), "--http", f"127.0.0.1:{HTTP}",
                "--repository", "/models", "--timeout", "2"]
        mounts: list[dict] = [{"name": "models", "mountPath": "/models"}, {"name": "tmp", "mountPath": "/tmp"},
                              {"name": "shm", "mountPath": "/dev/shm"}]
        volumes = [{"name": "repository", "persistentVolumeClaim": {"claimName": pvc, "readOnly": True}},
                   scratch("models", models_size), scratch("tmp", "1Gi"), scratch("shm", "2Gi", memory=True)]
        if spec.tls_secret:
            mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
            volumes.append(tls_volume(spec.tls_secret))
        container = {
            "name": "tritonserver", **image_fields(spec.image),
            "command": start_command(), "args": triton_args(models, bool(spec.tls_secret)) + trace_args(spec),
            "env": [{"name": ADMIN_ENV, "valueFrom": {"secretKeyRef": {"name": admin_secret, "key": "key"}}},
                    *writable_env(), {"name": DRAIN_ENV, "value": DRAIN_FILE}, *trace_env(spec)],
            "lifecycle": {"preStop": {"exec": {"command": pre_stop(spec.drain_grace_s)}}},
            "ports": [{"name": "http", "containerPort": HTTP}, {"name": "grpc", "containerPort": GRPC},
                      {"name": "metrics", "containerPort": METRICS}],
            # plan builds happen in the init container; this covers model load and warm-up
            "startupProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 10,
                             "timeoutSeconds": 5, "failureThreshold": 90},
            "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 5,
                               "timeoutSeconds": 5},
            # Triton's live endpoint stays 200 when a Python stub dies; the repository's stdlib checker
            # also finds every loaded Python model's stub process. No inference: a busy pod stays live.
            "livenessProbe": {"exec": {"command": live}, "periodSeconds": 10, "timeoutSeconds": 5,
                              "failureThreshold": 3},
            "volumeMounts": mounts, "securityContext": container_security(),
            "resources": resources(spec.pool_cpu, spec.pool_memory, spec.gpus if wants_gpu(m) else 0, scratch=add_gi(models_size, "1Gi")),
        }
        files[f"{pool}.yaml"] = workload(
            pool, labels, spec.replicas, max(spec.max_replicas, spec.replicas),
            {**pod_spec([container], volumes, init), "terminationGracePeriodSeconds": termination_grace_s(spec.drain_grace_s)},
            [{"name": "grpc", "port": GRPC, "targetPort": "grpc"}, {"name": "http", "port": HTTP, "targetPort": "http"},
             {"name": "metrics", "port": METRICS, "targetPort": "metrics"}],
            [{"type": "Pods", "pods": {"metric": {"name": QUEUE_METRIC},
                                       "target": {"type": "AverageValue", "averageValue": str(int(spec.target_queue_ms * 1000))}}}],
            annotations={"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS)},
            behavior={"scaleDown": {"stabilizationWindowSeconds": 300}})
        pool_args += [a for b in bs for a in ("--pool", f"{name}:{b}={pool}:{GRPC}" if several else f"{b}={pool}:{GRPC}")]
    return pool_args
