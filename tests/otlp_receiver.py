"""An OTLP/HTTP trace receiver on loopback, as a collector is: POST /v1/traces with an
ExportTraceServiceRequest (protobuf), decoded with opentelemetry-proto; each span kept as a plain dict."""

from __future__ import annotations

import base64
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _hex_ids(doc):
    """OTLP/JSON writes trace and span ids in hex, where protobuf's JSON mapping reads bytes as base64."""
    if isinstance(doc, list):
        return [_hex_ids(x) for x in doc]
    if not isinstance(doc, dict):
        return doc
    return {k: base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId", "parentSpanId") and v
            else _hex_ids(v) for k, v in doc.items()}


def _value(v) -> object:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver:
    def __init__(self) -> None:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                               ExportTraceServiceResponse)

        self.spans: list[dict] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                req = ExportTraceServiceRequest()
                if "json" in self.headers.get("content-type", ""):   # OTLP/HTTP's JSON (tritonserver's exporter)
                    json_format.ParseDict(_hex_ids(json.loads(body)), req)
                else:
                    req.ParseFromString(body)
                owner._keep(req)
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def _keep(self, req) -> None:
        got = []
        for rs in req.resource_spans:
            service = {a.key: _value(a.value) for a in rs.resource.attributes}.get("service.name")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append({"name": s.name, "service": service, "trace_id": s.trace_id.hex(),
                                "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                                "attributes": {a.key: _value(a.value) for a in s.attributes},
                                "links": [ln.span_id.hex() for ln in s.links],
                                "start": s.start_time_unix_nano, "end": s.end_time_unix_nano})
        with self.lock:
            self.spans.extend(got)

    def of_trace(self, trace_id: str) -> list[dict]:
        with self.lock:
            return [s for s in self.spans if s["trace_id"] == trace_id]

    def __enter__(self) -> "Receiver":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
