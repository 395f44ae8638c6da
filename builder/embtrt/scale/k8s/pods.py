"""What every rendered pod shares: the Pod Security "restricted" contexts, resources, scratch volumes."""

from __future__ import annotations

import math
from pathlib import Path

USER = 1000
SECCOMP = {"type": "RuntimeDefault"}


def container_security() -> dict:
    """Non-root user 1000, read-only root filesystem, no capabilities, no privilege escalation, the
    runtime's default seccomp profile: every rule of Pod Security "restricted", per container."""
    return {"runAsNonRoot": True, "runAsUser": USER, "runAsGroup": USER, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True, "privileged": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": dict(SECCOMP)}


def pod_spec(containers: list[dict], volumes: list[dict], init: list[dict] | None = None) -> dict:
    """A pod that runs as user 1000 under RuntimeDefault seccomp, without the service-account token
    (nothing here talks to the Kubernetes API), and shares no host namespace."""
    spec: dict = {"automountServiceAccountToken": False, "enableServiceLinks": False,
                  "securityContext": {"runAsNonRoot": True, "runAsUser": USER, "runAsGroup": USER, "fsGroup": USER,
                                      "seccompProfile": dict(SECCOMP)}}
    if init:
        spec["initContainers"] = init
    spec["containers"] = containers
    spec["volumes"] = volumes
    return spec


def resources(cpu: str, mem: str, gpus: int = 0, scratch: str | None = None) -> dict:
    """Requests equal to limits (Guaranteed QoS), the GPU and ephemeral storage included."""
    req = {"cpu": cpu, "memory": mem}
    if gpus:
        req["nvidia.com/gpu"] = str(gpus)
    if scratch:
        req["ephemeral-storage"] = scratch
    return {"requests": dict(req), "limits": dict(req)}


def image_fields(image: str) -> dict:
    """The image as given (a digest pins it: registry/name@sha256:...), pulled when not present: the
    default images carry embtrt's version in their tag, so a new release is a new tag."""
    return {"image": image, "imagePullPolicy": "IfNotPresent"}


def scratch(name: str, size: str, memory: bool = False) -> dict:
    """A pod-local emptyDir with a size limit (kubelet evicts a pod that writes past it)."""
    ed: dict = {"sizeLimit": size}
    if memory:
        ed["medium"] = "Memory"
    return {"name": name, "emptyDir": ed}


def repository_size(repo: Path) -> str:
    """Room for a copy of the repository in a pod: twice its size on disk (the plans TensorRT writes
    beside the ONNX, Python caches), in whole Gi, at least 1Gi."""
    total = sum(p.stat().st_size for p in Path(repo).rglob("*") if p.is_file() and not p.is_symlink())
    total += sum(p.resolve().stat().st_size for p in Path(repo).rglob("*") if p.is_symlink() and p.resolve().is_file())
    return f"{max(1, math.ceil(2 * total / 2**30))}Gi"


def add_gi(*sizes: str) -> str:
    return f"{sum(int(s.removesuffix('Gi')) for s in sizes)}Gi"


def tls_volume(secret: str) -> dict:
    return {"name": "tls", "secret": {"secretName": secret, "defaultMode": 0o440, "optional": False}}


def workload(name: str, labels: dict, replicas: int, max_replicas: int, pod: dict, ports: list[dict], metrics: list[dict],
             annotations: dict | None = None, behavior: dict | None = None) -> list[dict]:
    """A Deployment of `pod` and its Service, HPA (on `metrics`) and PDB, all named `name`."""
    meta, selector = {"name": name, "labels": labels}, {"app.kubernetes.io/name": name}
    template = {"metadata": {"labels": labels, **({"annotations": annotations} if annotations else {})}, "spec": pod}
    hpa = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, "minReplicas": replicas,
           "maxReplicas": max_replicas, "metrics": metrics, **({"behavior": behavior} if behavior else {})}
    return [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
             "spec": {"replicas": replicas, "selector": {"matchLabels": selector}, "template": template}},
            {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {"selector": selector, "ports": ports}},
            {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta, "spec": hpa},
            # maxUnavailable, never minAvailable: with one replica, minAvailable 1 blocks every node drain
            {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta,
             "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}}}]
