"""`embtrt k8s`: plain Kubernetes YAML for length pools of tritonservers behind `embtrt gateway`.

Per length pool (a range of buckets): a Deployment of tritonserver serving only that pool's
models (`--model-control-mode=explicit --load-model=...`), its Service, an autoscaling/v2
HPA on Triton's average queue time (through prometheus-adapter, whose rule is rendered as a
ConfigMap) and a PodDisruptionBudget. The gateway: Deployment, Service, CPU HPA. A
NetworkPolicy lets only the gateway reach the pools' inference ports (and Prometheus their
metrics port). No CRDs, no Helm; a kustomization.yaml ties the files together.

The repository comes from a PersistentVolumeClaim (read-only); each pool pod copies it into a
pod-local volume, and for TensorRT targets an init container runs `embtrt engines` there, so
the plans are built on the GPU that serves them. Non-root, read-only root filesystems,
requests and limits everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import SpecError
from ..repository.manifest import read_manifest

GRPC, HTTP, METRICS, GATEWAY_PORT = 8001, 8000, 8002, 8080
QUEUE_METRIC = "embtrt_triton_queue_avg_us"  # exposed by the prometheus-adapter rule below
PART_OF = "app.kubernetes.io/part-of"


@dataclass(frozen=True)
class K8sSpec:
    repository: Path
    out: Path
    pools: tuple[int, ...] = ()        # upper bucket of each pool; default: one pool per bucket
    image: str = "nvcr.io/nvidia/tritonserver:25.06-py3"
    gateway_image: str = "embtrt:latest"
    engines_image: str | None = None   # an image with tritonserver's TensorRT + `pip install 'embtrt[tensorrt]'`
    gpus: int = 1
    replicas: int = 1
    max_replicas: int = 8
    target_queue_ms: float = 50.0
    repo_pvc: str | None = None
    namespace: str | None = None
    # Further repositories (one model each) on pools of their own behind the same gateway; each is
    # read from its own PersistentVolumeClaim, <model>-repository.
    more_repositories: tuple[Path, ...] = ()


def _name(s: str) -> str:
    return s.replace("_", "-").lower()


def _security() -> dict:
    return {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def _resources(cpu: str, mem: str, gpus: int = 0) -> dict:
    req = {"cpu": cpu, "memory": mem}
    lim = {"cpu": cpu, "memory": mem}
    if gpus:
        lim["nvidia.com/gpu"] = str(gpus)
        req["nvidia.com/gpu"] = str(gpus)
    return {"requests": req, "limits": lim}


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


def render(spec: K8sSpec) -> dict[str, list[dict]]:
    """{file name: [documents]}."""
    repos = [Path(spec.repository), *map(Path, spec.more_repositories)]
    manifests = [read_manifest(r) for r in repos]
    several = len(manifests) > 1
    names = [m.name for m in manifests]
    if len(set(names)) != len(names) or len({_name(n) for n in names}) != len(names):
        raise SpecError(f"invalid repositories: model names repeat ({', '.join(names)})",
                        "build each with its own --name")
    if several and spec.repo_pvc:
        raise SpecError("invalid --repo-pvc with several repositories", "each model's claim is <model>-repository")
    app = _name(names[0])
    common = {PART_OF: app, "app.kubernetes.io/managed-by": "embtrt"}
    files: dict[str, list[dict]] = {}
    pool_args: list[str] = []
    gw_volumes: list[dict] = []
    gw_mounts: list[dict] = []
    gw_repos: list[str] = []
    prom_pods = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}, "namespaceSelector": {}}
    for m in manifests:
        mapp = _name(m.name)
        pvc = spec.repo_pvc or f"{mapp}-repository"
        volume = "repository" if not several else f"repository-{mapp}"
        mount = "/repository" if not several else f"/repositories/{mapp}"
        gw_volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": pvc, "readOnly": True}})
        gw_mounts.append({"name": volume, "mountPath": mount, "readOnly": True})
        gw_repos.append(mount)
        pool_args += _model_pools(spec, m, mapp, pvc, common, files, several)
    _gateway_and_rest(spec, app, common, files, pool_args, gw_volumes, gw_mounts, gw_repos, prom_pods)
    kust: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                            "resources": sorted(files)}
    if spec.namespace:
        kust["namespace"] = spec.namespace
    files["kustomization.yaml"] = [kust]
    return files


def _model_pools(spec: K8sSpec, m, app: str, pvc: str, common: dict, files: dict, several: bool) -> list[str]:
    """One model's length pools (Deployment, Service, HPA, PDB each); the gateway's --pool arguments."""
    name, buckets, tensorrt = m.name, list(m.buckets), m.target == "tensorrt"
    pool_args: list[str] = []
    try:
        pools = plan_pools(buckets, spec.pools)
    except SpecError as exc:
        raise SpecError(f"{name}: {exc.message}", exc.hint) from None
    for bs in pools:
        pool = f"{app}-pool-{max(bs)}"
        labels = {**common, "app.kubernetes.io/name": pool, "app.kubernetes.io/component": "triton-pool",
                  "embtrt.io/pool": str(max(bs))}
        models = [m_ for b in bs for m_ in (f"{name}_{b}_encoder", f"{name}_{b}_tokenizer", f"{name}_{b}")]
        if m.pooler == "python":
            models += [f"{name}_{b}_pooler" for b in bs]
        init = [{
            "name": "copy-repository", "image": spec.image, "command": ["sh", "-c", "cp -a /repository/. /models/"],
            "volumeMounts": [{"name": "repository", "mountPath": "/repository", "readOnly": True},
                             {"name": "models", "mountPath": "/models"}],
            "securityContext": _security(), "resources": _resources("500m", "1Gi"),
        }]
        if tensorrt:
            init.append({
                "name": "engines", "image": spec.engines_image or spec.image,
                "command": ["embtrt", "engines", "/models"],
                "volumeMounts": [{"name": "models", "mountPath": "/models"}, {"name": "tmp", "mountPath": "/tmp"}],
                "securityContext": _security(), "resources": _resources("2", "8Gi", spec.gpus),
            })
        probe_cmd = ["embtrt", "probe", "--url", f"127.0.0.1:{GRPC}", "--no-expand"] + \
            [a for b in bs for a in ("--model", f"{name}_{b}")]
        container = {
            "name": "tritonserver", "image": spec.image,
            "command": ["tritonserver"],
            "args": ["--model-repository=/models", "--model-control-mode=explicit", "--strict-readiness=true",
                     f"--http-port={HTTP}", f"--grpc-port={GRPC}", f"--metrics-port={METRICS}", "--exit-on-error=true"]
                    + [f"--load-model={x}" for x in models],
            "ports": [{"name": "http", "containerPort": HTTP}, {"name": "grpc", "containerPort": GRPC},
                      {"name": "metrics", "containerPort": METRICS}],
            # plan build happens in the init container; this covers model load and warm-up
            "startupProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 10,
                             "failureThreshold": 90},
            "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 5},
            # /v2/health/live stays 200 when a Python stub dies: a real inference decides liveness
            "livenessProbe": {"exec": {"command": probe_cmd}, "periodSeconds": 15, "timeoutSeconds": 10,
                              "failureThreshold": 3},
            "volumeMounts": [{"name": "models", "mountPath": "/models"}, {"name": "tmp", "mountPath": "/tmp"},
                             {"name": "shm", "mountPath": "/dev/shm"}],
            "securityContext": _security(),
            "resources": _resources("4", "16Gi", spec.gpus if tensorrt else 0),
        }
        deploy = {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": pool, "labels": labels},
            "spec": {"replicas": spec.replicas, "selector": {"matchLabels": {"app.kubernetes.io/name": pool}},
                     "template": {"metadata": {"labels": labels,
                                               "annotations": {"prometheus.io/scrape": "true",
                                                               "prometheus.io/port": str(METRICS)}},
                                  "spec": {"securityContext": {"runAsNonRoot": True, "fsGroup": 1000},
                                           "initContainers": init, "containers": [container],
                                           "volumes": [
                                               {"name": "repository", "persistentVolumeClaim": {"claimName": pvc,
                                                                                                "readOnly": True}},
                                               {"name": "models", "emptyDir": {}},
                                               {"name": "tmp", "emptyDir": {}},
                                               {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}]}}},
        }
        svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": pool, "labels": labels},
               "spec": {"selector": {"app.kubernetes.io/name": pool},
                        "ports": [{"name": "grpc", "port": GRPC, "targetPort": "grpc"},
                                  {"name": "http", "port": HTTP, "targetPort": "http"},
                                  {"name": "metrics", "port": METRICS, "targetPort": "metrics"}]}}
        hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": pool, "labels": labels},
               "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": pool},
                        "minReplicas": spec.replicas, "maxReplicas": max(spec.max_replicas, spec.replicas),
                        "metrics": [{"type": "Pods", "pods": {
                            "metric": {"name": QUEUE_METRIC},
                            "target": {"type": "AverageValue", "averageValue": str(int(spec.target_queue_ms * 1000))}}}],
                        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}}}}
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": pool, "labels": labels},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": pool}}}}
        files[f"{pool}.yaml"] = [deploy, svc, hpa, pdb]
        pool_args += [a for b in bs for a in ("--pool", f"{name}:{b}={pool}:{GRPC}" if several else f"{b}={pool}:{GRPC}")]
    return pool_args


def _gateway_and_rest(spec: K8sSpec, app: str, common: dict, files: dict, pool_args: list[str], gw_volumes: list[dict],
                      gw_mounts: list[dict], gw_repos: list[str], prom_pods: dict) -> None:
    gw = f"{app}-gateway"
    glabels = {**common, "app.kubernetes.io/name": gw, "app.kubernetes.io/component": "gateway"}
    gcont = {
        "name": "gateway", "image": spec.gateway_image,
        "command": ["embtrt", "gateway", *gw_repos, "--host", "0.0.0.0", "--port", str(GATEWAY_PORT),
                    "--route", "ids", *pool_args],  # pools load bucket models only, no front door
        "ports": [{"name": "http", "containerPort": GATEWAY_PORT}],
        "readinessProbe": {"httpGet": {"path": "/health/ready", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/health/live", "port": "http"}, "periodSeconds": 10},
        "volumeMounts": [*gw_mounts, {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": _security(), "resources": _resources("2", "2Gi"),
    }
    files["gateway.yaml"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": gw, "labels": glabels},
         "spec": {"replicas": 2, "selector": {"matchLabels": {"app.kubernetes.io/name": gw}},
                  "template": {"metadata": {"labels": glabels},
                               "spec": {"securityContext": {"runAsNonRoot": True, "fsGroup": 1000}, "containers": [gcont],
                                        "volumes": [*gw_volumes, {"name": "tmp", "emptyDir": {}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": gw, "labels": glabels},
         "spec": {"selector": {"app.kubernetes.io/name": gw},
                  "ports": [{"name": "http", "port": GATEWAY_PORT, "targetPort": "http"}]}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": gw, "labels": glabels},
         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": gw},
                  "minReplicas": 2, "maxReplicas": 16,
                  "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                                "target": {"type": "Utilization", "averageUtilization": 70}}}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": gw, "labels": glabels},
         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": gw}}}},
    ]
    files["networkpolicy.yaml"] = [{
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": f"{app}-pools-from-gateway", "labels": common},
        "spec": {"podSelector": {"matchLabels": {PART_OF: app, "app.kubernetes.io/component": "triton-pool"}},
                 "policyTypes": ["Ingress"],
                 "ingress": [
                     {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": gw}}}],
                      "ports": [{"protocol": "TCP", "port": GRPC}, {"protocol": "TCP", "port": HTTP}]},
                     {"from": [prom_pods], "ports": [{"protocol": "TCP", "port": METRICS}]}]}}]
    rule = {"rules": [{
        "seriesQuery": 'nv_inference_queue_duration_us{namespace!="",pod!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": "^nv_inference_queue_duration_us$", "as": QUEUE_METRIC},
        "metricsQuery": ("sum(rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>) / "
                         "clamp_min(sum(rate(nv_inference_request_success{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>), 1e-9)"),
    }]}
    files["prometheus-adapter-rules.yaml"] = [{
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{app}-prometheus-adapter-rules", "labels": common},
        "data": {"config.yaml": yaml.safe_dump(rule, sort_keys=False)}}]


def write(spec: K8sSpec, log=print) -> list[Path]:
    files = render(spec)
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, docs in files.items():
        p = out / fname
        p.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
        written.append(p)
    log(f"wrote {len(written)} files to {out}: " + ", ".join(sorted(files)))
    return written
