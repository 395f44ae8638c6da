"""The gateway (Deployment, Service, HPA, PDB), the Secrets, the NetworkPolicies and the
prometheus-adapter rule."""

from __future__ import annotations

import secrets

import yaml

from .pods import container_security, image_fields, pod_spec, resources, scratch, tls_volume, workload
from .spec import GATEWAY_PORT, GRPC, METRICS, PART_OF, QUEUE_METRIC, K8sSpec

API_KEY_ENV = "EMBTRT_API_KEY"
TLS_DIR = "/etc/embtrt/tls"
PROMETHEUS = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}, "namespaceSelector": {}}
DNS = {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
       "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}


def secret(name: str, labels: dict, key: str, value: str | None) -> dict:
    """An Opaque Secret holding one generated value (a new one unless the previous render's is kept)."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": labels}, "type": "Opaque",
            "stringData": {key: value or secrets.token_urlsafe(32)}}


def trace_args(spec: K8sSpec) -> list[str]:
    """The gateway's tracing flags (the image has embtrt[tracing])."""
    if spec.otlp_endpoint is None:
        return []
    return ["--otlp-endpoint", spec.otlp_endpoint, "--trace-sample", f"{spec.trace_sample:g}"]


def gateway(spec: K8sSpec, app: str, common: dict, files: dict, pool_args: list[str], volumes: list[dict],
            mounts: list[dict], repos: list[str], api_secret: str) -> None:
    gw = f"{app}-gateway"
    labels = {**common, "app.kubernetes.io/name": gw, "app.kubernetes.io/component": "gateway"}
    scheme = "HTTP"
    tls_args: list[str] = []
    if spec.tls_secret:
        scheme = "HTTPS"
        tls_args = ["--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key",
                    "--pool-tls-ca", f"{TLS_DIR}/ca.crt"]
        mounts = [*mounts, {"name": "tls", "mountPath": TLS_DIR, "readOnly": True}]
        volumes = [*volumes, tls_volume(spec.tls_secret)]
    cont = {
        "name": "gateway", **image_fields(spec.gateway_image),
        "command": ["embtrt", "gateway", *repos, "--host", "0.0.0.0", "--port", str(GATEWAY_PORT),
                    # the route: the pools load bucket models only
                    "--route", "ids", "--api-key-env", API_KEY_ENV, *tls_args, *trace_args(spec), *pool_args],
        "env": [{"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": api_secret, "key": "api-key"}}}],
        "ports": [{"name": "http", "containerPort": GATEWAY_PORT}],
        "readinessProbe": {"httpGet": {"path": "/health/ready", "port": "http", "scheme": scheme},
                           "periodSeconds": 10, "timeoutSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/health/live", "port": "http", "scheme": scheme},
                          "periodSeconds": 10, "timeoutSeconds": 5},
        "volumeMounts": [*mounts, {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": container_security(), "resources": resources("2", "2Gi", scratch="512Mi"),
    }
    files["gateway.yaml"] = workload(
        gw, labels, spec.gateway_replicas, max(16, spec.gateway_replicas), pod_spec([cont], [*volumes, scratch("tmp", "256Mi")]),
        [{"name": "http", "port": GATEWAY_PORT, "targetPort": "http"}],
        [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}])


def network_policies(app: str, common: dict) -> list[dict]:
    """Pools: in, only the gateway to gRPC and Prometheus to metrics; out, nothing. The gateway: in,
    its HTTP port (clients, an ingress controller, Prometheus's /metrics); out, the pools' gRPC and DNS."""
    gw = {"matchLabels": {"app.kubernetes.io/name": f"{app}-gateway"}}
    pools = {"matchLabels": {PART_OF: app, "app.kubernetes.io/component": "triton-pool"}}
    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": f"{app}-pools-from-gateway", "labels": common},
         "spec": {"podSelector": pools, "policyTypes": ["Ingress", "Egress"],
                  "ingress": [{"from": [{"podSelector": gw}], "ports": [{"protocol": "TCP", "port": GRPC}]},
                              {"from": [PROMETHEUS], "ports": [{"protocol": "TCP", "port": METRICS}]}],
                  "egress": []}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": f"{app}-gateway", "labels": common},
         "spec": {"podSelector": gw, "policyTypes": ["Ingress", "Egress"],
                  "ingress": [{"ports": [{"protocol": "TCP", "port": GATEWAY_PORT}]}],
                  "egress": [{"to": [{"podSelector": pools}], "ports": [{"protocol": "TCP", "port": GRPC}]}, DNS]}},
    ]


def adapter_rules(app: str, common: dict) -> dict:
    rule = {"rules": [{
        "seriesQuery": 'nv_inference_queue_duration_us{namespace!="",pod!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": "^nv_inference_queue_duration_us$", "as": QUEUE_METRIC},
        "metricsQuery": ("sum(rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>) / "
                         "clamp_min(sum(rate(nv_inference_request_success{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>), 1e-9)"),
    }]}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{app}-prometheus-adapter-rules", "labels": common},
            "data": {"config.yaml": yaml.safe_dump(rule, sort_keys=False)}}
