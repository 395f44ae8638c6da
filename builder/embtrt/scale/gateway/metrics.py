"""The gateway's Prometheus metrics (GET /metrics), one registry per gateway."""

from __future__ import annotations

from typing import Any

from . import tracing

# the latency histograms, by the Metrics attribute an Operation names (its `latency`): what dashboards and
# alert rules query (scale/k8s/observe.py)
LATENCY = {"latency": ("embtrt_gateway_request_seconds", "Latency of /v1/embeddings"),
           "rerank_latency": ("embtrt_gateway_rerank_seconds", "Latency of the rerank routes"),
           "sparse_latency": ("embtrt_gateway_sparse_seconds", "Latency of the sparse routes"),
           "classify_latency": ("embtrt_gateway_classify_seconds", "Latency of the classify routes"),
           "tokenize_latency": ("embtrt_gateway_tokenize_seconds", "Latency of the tokenize routes")}


class Metrics:
    latency: Any          # the LATENCY histograms, set by name
    rerank_latency: Any
    sparse_latency: Any
    classify_latency: Any
    tokenize_latency: Any

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("embtrt_gateway_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=self.registry)
        self.items = Counter("embtrt_gateway_items", "Items embedded (rerankers: documents scored; sparse: texts), "
                             "per pool", ["pool"], registry=self.registry)
        self.tokens = Counter("embtrt_gateway_tokens", "Tokens embedded (rerankers: of the pairs scored), per pool",
                              ["pool"], registry=self.registry)
        self.errors = Counter("embtrt_gateway_errors", "Error responses by status", ["status"], registry=self.registry)
        self.model_requests = Counter("embtrt_gateway_model_requests",
                                      "Embedding, rerank and sparse requests per model and status", ["model", "status"],
                                      registry=self.registry)
        self.in_flight = Gauge("embtrt_gateway_requests_in_flight",
                               "Embedding, rerank and sparse requests admitted and not yet answered", registry=self.registry)
        self.retries = Counter("embtrt_gateway_upstream_retries", "Upstream calls retried on another replica",
                               ["pool", "reason"], registry=self.registry)
        buckets = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)
        for attr, (name, doc) in LATENCY.items():
            setattr(self, attr, Histogram(name, doc, buckets=buckets, registry=self.registry))
        self.model_latency = Histogram("embtrt_gateway_model_request_seconds",
                                       "Latency of answered (200) requests, per model (its reported name) and dialect",
                                       ["model", "dialect"], buckets=buckets, registry=self.registry)
        self.refusals = Counter("embtrt_gateway_refusals", "Error answers by status and reason (the error's code, "
                                "else its type)", ["status", "reason"], registry=self.registry)
        self.upstream = Histogram("embtrt_gateway_upstream_seconds", "Latency of one upstream call, per pool", ["pool"],
                                  buckets=buckets, registry=self.registry)
        self.call_rows = Histogram("embtrt_gateway_upstream_rows",
                                   "Rows per coalesced upstream call, per pool and route (frontdoor, ids)",
                                   ["pool", "route"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=self.registry)
        self._children: dict[tuple, Any] = {}

    def of(self, metric, *labels):
        """metric.labels(*labels), kept: labels() takes a lock and builds its key on every call, and the hot
        path asks for the same few children on every request."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def refused(self, status: int, reason: str) -> None:
        """An error answer, counted by its status (embtrt_gateway_errors) and by status and reason."""
        self.of(self.errors, str(status)).inc()
        self.of(self.refusals, str(status), reason).inc()

    def count(self, pool: str, items: int, tokens: int) -> None:
        self.of(self.items, pool).inc(items)
        self.of(self.tokens, pool).inc(tokens)
        tracing.count(items, tokens)
