"""What a team watches a deployment with (#72): a Grafana dashboard, Prometheus alert rules and, for the
Prometheus Operator, the monitors that scrape the pools and the gateway.

Every query reads metrics the gateway (`embtrt_gateway_*`, scale/gateway/metrics.py) and tritonserver
(`nv_inference_*`) export; the pools' and the gateway's scrape jobs are named `<app>-pools` and
`<app>-gateway` (the PodMonitors' own names; a Prometheus of one's own names its jobs so). The suite runs
every panel's query against a real Prometheus scraping a real gateway and tritonserver, and the alert
rules through `promtool check rules` and `promtool test rules` (tests/integration/test_observability.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from embtrt_backend.kinds import kind_of

from ...repository.manifest import Manifest
from .spec import PART_OF

RATE = "$__rate_interval"   # Grafana's rate window (at least four scrape intervals)
DASHBOARD_LABEL = {"grafana_dashboard": "1"}   # the label the Grafana chart's dashboard sidecar watches
DEFAULT_SLO_MS = 1000.0


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str                              # Grafana's unit: reqps, s, ms, short, percentunit
    targets: tuple[tuple[str, str], ...]   # (legend, PromQL)


def _per(numerator: str, denominator: str) -> str:
    return f"{numerator} / clamp_min({denominator}, 1e-9)"


def latency_metrics(manifests: list[Manifest]) -> dict[str, str]:
    """The gateway's latency histograms the deployed kinds' operations fill: {metric name: route label}."""
    from ..gateway.metrics import LATENCY
    from ..gateway.operations import operations

    ops = operations()
    out: dict[str, str] = {}
    for m in manifests:
        for name in kind_of(m.kind).operations:
            op = ops.get(name)
            if op is not None and op.latency in LATENCY:
                out.setdefault(LATENCY[op.latency][0], op.metric_route)
    return out


def panels(app: str, latency: dict[str, str], gpu: bool) -> list[Panel]:
    r = RATE
    out = [
        Panel("Requests per second, by model and status", "reqps",
              (("{{model}} {{status}}", f"sum by (model, status) (rate(embtrt_gateway_model_requests_total[{r}]))"),)),
        Panel("Server errors (5xx), share of requests", "percentunit",
              (("5xx", _per(f'(sum(rate(embtrt_gateway_requests_total{{status=~"5.."}}[{r}])) or vector(0))',
                            f"sum(rate(embtrt_gateway_requests_total[{r}]))")),)),
        Panel("Refused requests per second, by status and reason", "reqps",
              (("{{status}} {{reason}}", f'sum by (status, reason) (rate(embtrt_gateway_refusals_total{{status=~"4.."}}[{r}]))'),)),
        Panel("Latency at the gateway by model and dialect, p99", "s", (
            ("{{model}} {{dialect}}",
             f"histogram_quantile(0.99, sum by (model, dialect, le) (rate(embtrt_gateway_model_request_seconds_bucket[{r}])))"),)),
    ]
    for metric, route in latency.items():
        out.append(Panel(f"Latency at the gateway, {route}", "s", tuple(
            (f"p{int(q * 100)}", f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket[{r}])))")
            for q in (0.5, 0.99))))
    out += [
        Panel("Upstream call p99, by pool", "s", (
            ("{{pool}}", f"histogram_quantile(0.99, sum by (pool, le) (rate(embtrt_gateway_upstream_seconds_bucket[{r}])))"),)),
        Panel("Upstream calls retried per second, by pool and reason (draining: a replica shutting down)", "reqps", (
            ("{{pool}} {{reason}}", f"sum by (pool, reason) (rate(embtrt_gateway_upstream_retries_total[{r}]))"),)),
        Panel("Rows per upstream call, by pool", "short", (
            ("{{pool}}", _per(f"sum by (pool) (rate(embtrt_gateway_upstream_rows_sum[{r}]))",
                              f"sum by (pool) (rate(embtrt_gateway_upstream_rows_count[{r}]))")),)),
        Panel("Items and tokens per second, by pool", "short", (
            ("items {{pool}}", f"sum by (pool) (rate(embtrt_gateway_items_total[{r}]))"),
            ("tokens {{pool}}", f"sum by (pool) (rate(embtrt_gateway_tokens_total[{r}]))"))),
        Panel("Requests in flight at the gateway", "short", (("in flight", "sum(embtrt_gateway_requests_in_flight)"),)),
        Panel("Triton queue time per request, by model (ms)", "ms", (
            ("{{model}}", _per(f"sum by (model) (rate(nv_inference_queue_duration_us[{r}]))",
                               f"sum by (model) (rate(nv_inference_request_success[{r}]))") + " / 1000"),)),
        Panel("Triton compute time per request, by model (ms)", "ms", (
            ("{{model}}", _per(f"sum by (model) (rate(nv_inference_compute_infer_duration_us[{r}]))",
                               f"sum by (model) (rate(nv_inference_request_success[{r}]))") + " / 1000"),)),
        Panel("Triton batch size (inferences per execution), by model", "short", (
            ("{{model}}", _per(f"sum by (model) (rate(nv_inference_count[{r}]))",
                               f"sum by (model) (rate(nv_inference_exec_count[{r}]))")),)),
        Panel("Scrape targets up (pools, gateway)", "short", (
            ("{{job}} {{instance}}", f'up{{job=~".*{app}-(pools|gateway)"}}'),)),
    ]
    if gpu:   # NVIDIA's DCGM exporter, where the cluster runs it
        out.append(Panel("GPU memory used", "percentunit", (
            ("{{Hostname}} GPU {{gpu}}", _per("DCGM_FI_DEV_FB_USED", "(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)")),)))
    return out


def dashboard(app: str, latency: dict[str, str], gpu: bool) -> dict:
    """Grafana's dashboard JSON: one time series panel per Panel, two a row, on a Prometheus data source picked
    by the dashboard's `datasource` variable."""
    source = {"type": "prometheus", "uid": "${datasource}"}
    items = []
    for i, p in enumerate(panels(app, latency, gpu)):
        items.append({
            "id": i + 1, "type": "timeseries", "title": p.title, "datasource": source,
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
            "targets": [{"refId": chr(ord("A") + j), "datasource": source, "expr": expr, "legendFormat": legend}
                        for j, (legend, expr) in enumerate(p.targets)]})
    return {"title": f"embtrt: {app}", "uid": f"embtrt-{app}"[:40], "tags": ["embtrt"], "schemaVersion": 39,
            "version": 1, "editable": True, "refresh": "30s", "time": {"from": "now-1h", "to": "now"},
            "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                     "query": "prometheus"}]},
            "panels": items}


def slo_seconds(manifests: list[Manifest], given_ms: float | None) -> float:
    """The p99 the latency alert holds the gateway to: `given_ms`, else the highest SLO `embtrt tune` tuned a
    repository for (a per-bucket SLO: its highest bucket's), else DEFAULT_SLO_MS."""
    if given_ms is not None:
        return given_ms / 1000
    tuned = [m.extra.get("tuning", {}).get("slo_p99_ms") for m in manifests]
    values = [max(v.values()) if isinstance(v, dict) else v for v in tuned if v]
    return float(max(values) if values else DEFAULT_SLO_MS) / 1000


def alert_rules(app: str, latency: dict[str, str], slo_s: float, gpu: bool) -> dict:
    """Prometheus rule groups (the file format `promtool check rules` reads)."""
    def rule(name: str, expr: str, for_: str, severity: str, summary: str, description: str, **labels: str) -> dict:
        return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity, "app": app, **labels},
                "annotations": {"summary": summary, "description": description}}

    total = "sum(rate(embtrt_gateway_requests_total[5m]))"
    rules = [
        rule("EmbtrtServerErrors", _per('sum(rate(embtrt_gateway_requests_total{status=~"5.."}[5m]))', total) + " > 0.05",
             "5m", "critical", f"{app}: over 5% of requests fail with 5xx",
             "The gateway answers over 5% of requests with a server error (an upstream pool failing or unreachable); "
             "the gateway's log and the pools' tritonserver logs say why."),
        rule("EmbtrtPoolDown", f'up{{job=~".*{app}-pools"}} == 0', "2m", "critical",
             f"{app}: a pool's tritonserver does not answer its metrics port",
             "A pool pod's tritonserver has stopped answering (its metrics port is not scraped): the gateway sends "
             "that pool's lengths to its other replicas, if any."),
        rule("EmbtrtRequestsStuck", f"sum(embtrt_gateway_requests_in_flight) > 0 and {total} == 0", "5m", "warning",
             f"{app}: requests in flight and none answered for 5 minutes",
             "Requests are admitted but none has been answered for 5 minutes: a drain that does not finish or an "
             "upstream call that never returns."),
    ]
    for metric, route in latency.items():
        rules.append(rule("EmbtrtLatencyOverSLO",
                          f"histogram_quantile(0.99, sum by (le) (rate({metric}_bucket[5m]))) > {slo_s:g}", "10m",
                          "warning", f"{app}: p99 of {route} over {slo_s * 1000:g} ms",
                          f"The gateway's p99 latency of {route} requests has been over the SLO ({slo_s * 1000:g} ms) "
                          "for 10 minutes: more replicas, or `embtrt tune` for this load.", route=route))
    if gpu:
        rules.append(rule("EmbtrtGPUMemoryNearFull",
                          _per("DCGM_FI_DEV_FB_USED", "(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)") + " > 0.9", "10m",
                          "warning", f"{app}: a GPU's memory over 90% used",
                          "A GPU's framebuffer has been over 90% used for 10 minutes (DCGM exporter): a larger "
                          "engine profile or another model may not fit."))
    return {"groups": [{"name": f"embtrt-{app}", "rules": rules}]}


def render(app: str, common: dict, manifests: list[Manifest], gpu: bool, slo_ms: float | None,
           operator: bool, tls_secret: str | None = None) -> dict[str, list[dict]]:
    """The observability files: the dashboard and the rules as ConfigMaps; with `operator` a PrometheusRule
    and PodMonitors for the pools and the gateway (Prometheus Operator CRDs; the gateway's scraped over HTTPS
    with the TLS Secret's CA where it serves HTTPS)."""
    import json

    latency = latency_metrics(manifests)
    rules = alert_rules(app, latency, slo_seconds(manifests, slo_ms), gpu)
    meta = {"labels": common}
    files = {
        "dashboard.yaml": [{"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": f"{app}-dashboard", "labels": {**common, **DASHBOARD_LABEL}},
                            "data": {f"{app}.json": json.dumps(dashboard(app, latency, gpu), indent=1)}}],
        "alert-rules.yaml": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{app}-alert-rules", **meta},
                              "data": {"embtrt.rules.yml": yaml.safe_dump(rules, sort_keys=False)}}],
    }
    if operator:
        def monitor(name: str, selector: dict, port: str, tls: dict | None = None) -> dict:
            return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
                    "metadata": {"name": name, **meta},
                    "spec": {"selector": {"matchLabels": selector},
                             "podMetricsEndpoints": [{"port": port, "path": "/metrics", "interval": "15s", **(tls or {})}]}}

        https = None if tls_secret is None else {
            "scheme": "https", "tlsConfig": {"ca": {"secret": {"name": tls_secret, "key": "ca.crt"}},
                                             "serverName": f"{app}-gateway"}}

        files["monitoring.yaml"] = [
            {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
             "metadata": {"name": f"{app}-alerts", **meta}, "spec": rules},
            monitor(f"{app}-pools", {PART_OF: app, "app.kubernetes.io/component": "triton-pool"}, "metrics"),
            monitor(f"{app}-gateway", {"app.kubernetes.io/name": f"{app}-gateway"}, "http", https),
        ]
    return files
