"""The classify operation's routes: TEI's /predict, vLLM's /classify (scale_schema), one row."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embtrt_backend.kinds import CLASSIFIER, Kind

from ...scale.gateway.operation import Operation
from .scale_schema import ClassifyModel, ClassifyRequest, answer, parse_classify, parse_predict

def parse(models: Mapping[str, ClassifyModel], kinds: Mapping[str, Kind], cfg, path: str, body: Any) -> ClassifyRequest:
    return parse_classify(body, models, kinds, cfg) if path == "/classify" else parse_predict(body, models, kinds, cfg)


OPERATIONS = (Operation("classify", CLASSIFIER.metric_route, "classify_latency", parse, answer, needs=(("classify",),)),)
