"""#72: what `embtrt k8s` renders to watch a deployment, checked with real parts. A real Prometheus (Debian's
package: tests/prometheus-setup.sh, run by make test-all) scrapes a real tritonserver and the gateway in front of
it on loopback, with the rendered alert rules loaded: every panel of the rendered dashboard returns data from
it, the rules load healthy and none fires while serving is healthy. promtool checks the rules and fires each
one on the series it watches (and not on healthy ones)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from embtrt.repository.manifest import read_manifest
from embtrt.scale.k8s import observe
from embtrt.serve.server import free_port
from test_gateway import NAME, gateway
from waiting import until

pytestmark = pytest.mark.integration
APP = "minilm"


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    found = {t: shutil.which(t) for t in ("prometheus", "promtool")}
    missing = [t for t, path in found.items() if path is None]
    if missing:
        why = f"{', '.join(missing)} missing: bash tests/prometheus-setup.sh as root (make test-all runs it)"
        (pytest.fail if os.environ.get("EMBTRT_REQUIRE_PROMETHEUS") == "1" else pytest.skip)(why)
    return {t: str(p) for t, p in found.items()}


@pytest.fixture(scope="module")
def rendered(minilm_repo) -> tuple[dict, dict]:
    """The dashboard and the rules `embtrt k8s` renders for the MiniLM repository (an embedder on CPU), the
    latency alert at 2 s."""
    files = observe.render(APP, {}, [read_manifest(minilm_repo)], gpu=False, slo_ms=2000.0, operator=False)
    board = json.loads(next(iter(files["dashboard.yaml"][0]["data"].values())))
    rules = yaml.safe_load(files["alert-rules.yaml"][0]["data"]["embtrt.rules.yml"])
    return board, rules


def _promtool(tools, *args: str, cwd: Path) -> str:
    p = subprocess.run([tools["promtool"], *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def _alert(rules: dict, name: str) -> dict:
    return next(r for r in rules["groups"][0]["rules"] if r["alert"] == name)


def test_promtool_checks_the_rules_and_fires_each_on_what_it_watches(tools, rendered, tmp_path):
    _, rules = rendered
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    assert "SUCCESS: 4 rules found" in _promtool(tools, "check", "rules", "rules.yml", cwd=tmp_path)

    def fired(name: str) -> list[dict]:
        r = _alert(rules, name)
        return [{"exp_labels": r["labels"], "exp_annotations": r["annotations"]}]

    req = "embtrt_gateway_requests_total"
    bucket = "embtrt_gateway_request_seconds_bucket"
    tests = [
        # 1 in 7 requests a 503: fires after its 5 minutes; 1 in 61: never
        {"interval": "1m", "input_series": [{"series": f'{req}{{route="embeddings",status="200"}}', "values": "0+60x20"},
                                            {"series": f'{req}{{route="embeddings",status="503"}}', "values": "0+10x20"}],
         "alert_rule_test": [{"eval_time": "3m", "alertname": "EmbtrtServerErrors", "exp_alerts": []},
                             {"eval_time": "15m", "alertname": "EmbtrtServerErrors", "exp_alerts": fired("EmbtrtServerErrors")}]},
        {"interval": "1m", "input_series": [{"series": f'{req}{{route="embeddings",status="200"}}', "values": "0+60x20"},
                                            {"series": f'{req}{{route="embeddings",status="503"}}', "values": "0+1x20"}],
         "alert_rule_test": [{"eval_time": "15m", "alertname": "EmbtrtServerErrors", "exp_alerts": []}]},
        # a pool's metrics unreachable for 2 minutes; the gateway's never
        {"interval": "1m", "input_series": [{"series": f'up{{job="{APP}-pools",instance="a"}}', "values": "1 1 1 0 0 0 0 0"},
                                            {"series": f'up{{job="{APP}-gateway",instance="b"}}', "values": "1x8"}],
         "alert_rule_test": [{"eval_time": "7m", "alertname": "EmbtrtPoolDown", "exp_alerts": [
             {"exp_labels": {**_alert(rules, "EmbtrtPoolDown")["labels"], "job": f"{APP}-pools", "instance": "a"},
              "exp_annotations": _alert(rules, "EmbtrtPoolDown")["annotations"]}]}]},
        # requests in flight, none answered for 5 minutes; answered ones keep it quiet
        {"interval": "1m", "input_series": [{"series": "embtrt_gateway_requests_in_flight", "values": "3x20"},
                                            {"series": f'{req}{{route="embeddings",status="200"}}', "values": "100x20"}],
         "alert_rule_test": [{"eval_time": "15m", "alertname": "EmbtrtRequestsStuck", "exp_alerts": fired("EmbtrtRequestsStuck")}]},
        {"interval": "1m", "input_series": [{"series": "embtrt_gateway_requests_in_flight", "values": "3x20"},
                                            {"series": f'{req}{{route="embeddings",status="200"}}', "values": "0+50x20"}],
         "alert_rule_test": [{"eval_time": "15m", "alertname": "EmbtrtRequestsStuck", "exp_alerts": []}]},
        # every request between 2.5 and 5 s (over the 2 s SLO) for 20 minutes; then all under 0.5 s
        {"interval": "1m", "input_series": [
            *({"series": f'{bucket}{{le="{le}"}}', "values": "0x20"} for le in ("0.5", "1", "2.5")),
            *({"series": f'{bucket}{{le="{le}"}}', "values": "0+30x20"} for le in ("5", "10", "+Inf"))],
         "alert_rule_test": [{"eval_time": "18m", "alertname": "EmbtrtLatencyOverSLO",
                              "exp_alerts": fired("EmbtrtLatencyOverSLO")}]},
        {"interval": "1m", "input_series": [
            *({"series": f'{bucket}{{le="{le}"}}', "values": "0+30x20"} for le in ("0.5", "1", "2.5", "5", "10", "+Inf"))],
         "alert_rule_test": [{"eval_time": "18m", "alertname": "EmbtrtLatencyOverSLO", "exp_alerts": []}]},
    ]
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                        "tests": tests}))
    assert "SUCCESS" in _promtool(tools, "test", "rules", "tests.yml", cwd=tmp_path)

    # planted: the error alert's threshold raised out of reach: promtool fails on it
    broken = json.loads(json.dumps(rules))
    _alert(broken, "EmbtrtServerErrors")["expr"] = _alert(broken, "EmbtrtServerErrors")["expr"].replace("> 0.05", "> 0.5")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(broken))
    p = subprocess.run([tools["promtool"], "test", "rules", "tests.yml"], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode != 0 and "EmbtrtServerErrors" in p.stdout + p.stderr, p.stdout + p.stderr


def _query(prom: str, expr: str) -> list[dict]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_every_dashboard_panel_has_data_from_a_real_prometheus_scraping_the_gateway_and_tritonserver(
        tools, rendered, minilm_repo, minilm_server, tmp_path):
    board, rules = rendered
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    from embtrt.repository.manifest import read_manifest

    # each bucket's pool: a replica nobody listens on beside the real one, so that the calls that start
    # at it are retried (the retries panel's data; none of them fails)
    dead = f"127.0.0.1:{free_port()}"
    pools = [a for b in read_manifest(minilm_repo).buckets for a in ("--pool", f"{b}={dead},{minilm_server.grpc_url}")]
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url, *pools) as gw:
        host = gw.removeprefix("http://")
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": ["rules.yml"],
                  "scrape_configs": [
                      {"job_name": f"{APP}-gateway", "static_configs": [{"targets": [host]}]},
                      {"job_name": f"{APP}-pools", "static_configs": [{"targets": [f"127.0.0.1:{minilm_server.spec.metrics_port}"]}]}]}
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        prom = f"http://127.0.0.1:{port}"
        with open(tmp_path / "prometheus.log", "wb") as log:
            p = subprocess.Popen([tools["prometheus"], "--config.file=prometheus.yml", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                  f"--web.listen-address=127.0.0.1:{port}"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
        try:
            until(lambda: _ready(prom) or p.poll() is not None, 60, "prometheus ready")
            assert p.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            # traffic, across several scrapes: texts embedded, and one refused (an empty input: 4xx)
            texts = ["a cat sat on the mat", "stock markets fell sharply today", "the recipe needs two eggs"]
            for i in range(6):
                assert _post(f"{gw}/v1/embeddings", {"model": NAME, "input": texts[: 1 + i % 3]})[0] == 200
                until(lambda n=i: _count(prom) > n, 30, "the gateway's counter scraped")
            status, error = _post(f"{gw}/v1/embeddings", {"model": NAME, "input": []})
            assert status == 400, error
            reason = error["error"]["code"] or error["error"]["type"]
            # scraped twice at least (a rate needs two samples), counted under the answer's code (else its type)
            until(lambda: _query(prom, 'count_over_time(embtrt_gateway_refusals_total{status="400",reason="%s"}[1m]) >= 2'
                                 % reason), 30, "the refusal scraped twice")
            empty = []
            for panel in board["panels"]:
                for t in panel["targets"]:
                    expr = t["expr"].replace(observe.RATE, "1m")
                    if not _query(prom, expr):
                        empty.append(f"{panel['title']}: {expr}")
            assert not empty, "panels without data:\n" + "\n".join(empty)
            # the rules loaded, healthy, nothing firing while serving is healthy
            with urllib.request.urlopen(f"{prom}/api/v1/rules", timeout=10) as r:
                groups = json.loads(r.read())["data"]["groups"]
            loaded = {x["name"]: x for g in groups for x in g["rules"]}
            assert set(loaded) == {x["alert"] for x in rules["groups"][0]["rules"]}, loaded
            assert all(x["health"] == "ok" and x["state"] == "inactive" for x in loaded.values()), loaded
        finally:
            p.terminate()
            p.wait(timeout=30)


def _ready(prom: str) -> bool:
    try:
        with urllib.request.urlopen(f"{prom}/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _count(prom: str) -> float:
    got = _query(prom, 'sum(embtrt_gateway_model_requests_total{status="200"})')
    return float(got[0]["value"][1]) if got else 0.0
