"""`embtrt k8s` renders plain YAML that validates strictly offline and whose parts refer to each other."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from embtrt.export import build
from embtrt.scale.k8s import GRPC, QUEUE_METRIC, plan_pools
from embtrt.export.spec import Gate, spec_from_options

kv = pytest.importorskip("kubernetes_validate")  # a dev dependency (make install)


def versions() -> list[str]:
    from kubernetes_validate import utils

    vs = {v for v in utils.all_versions() if tuple(map(int, v.split(".")[:2])) >= (1, 30)}
    return sorted(vs, key=lambda v: tuple(map(int, v.split("."))))


@pytest.fixture(scope="module")
def repos(tiny_models, tmp_path_factory):
    base = tmp_path_factory.mktemp("k8s")
    out = {"cpu": base / "cpu", "trt": base / "trt"}
    build(spec_from_options(tiny_models["bert-cls"], out["cpu"], name="bert"), log=lambda m: None)
    build(spec_from_options(tiny_models["bert-cls"], out["trt"], name="bert", target="tensorrt",
                            gate=Gate(top10_overlap=0.0, recall_regression=1.0)), log=lambda m: None)
    return out


def rendered(repo: Path, out: Path, *args: str) -> dict[str, list[dict]]:
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "k8s", str(repo), "--out", str(out), *args],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return {f.name: [d for d in yaml.safe_load_all(f.read_text()) if d] for f in sorted(out.glob("*.yaml"))}


def test_pools_split_the_buckets_by_their_upper_edges():
    assert plan_pools([32, 128, 512, 2048], ()) == [(32,), (128,), (512,), (2048,)]
    assert plan_pools([32, 128, 512, 2048], (128,)) == [(32, 128), (512, 2048)]
    with pytest.raises(Exception, match="not buckets"):
        plan_pools([32, 128], (100,))


@pytest.mark.parametrize("kind", ["cpu", "trt"])
def test_every_document_validates_strictly_and_refers_to_things_that_exist(repos, tmp_path, kind):
    repo = repos[kind]
    files = rendered(repo, tmp_path / "out", "--pools", "32")
    m = json.loads((repo / "embtrt.json").read_text())
    docs = [d for name, ds in files.items() if name != "kustomization.yaml" for d in ds]
    vs = versions()
    assert vs[0] == "1.30.0" and len(vs) >= 8
    for d in docs:
        for v in vs:
            kv.validate(json.loads(json.dumps(d)), v, strict=True)
    assert sorted(files["kustomization.yaml"][0]["resources"]) == sorted(n for n in files if n != "kustomization.yaml")

    by_kind: dict[str, dict[str, dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    deploys = by_kind["Deployment"]
    pools = {n: d for n, d in deploys.items() if "-pool-" in n}
    assert sorted(pools) == ["bert-pool-32", "bert-pool-64"]
    models_on_disk = {p.parent.name for p in repo.glob("*/config.pbtxt")}
    served_buckets = []
    for name, d in deploys.items():
        pod = d["spec"]["template"]
        labels = pod["metadata"]["labels"]
        assert d["spec"]["selector"]["matchLabels"].items() <= labels.items()
        svc = by_kind["Service"][name]
        assert svc["spec"]["selector"].items() <= labels.items()
        containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        port_names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= port_names
        for c in containers:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
            assert c["resources"]["requests"] and c["resources"]["limits"]
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if "httpGet" in c.get(probe, {}):
                    assert c[probe]["httpGet"]["port"] in port_names
        mounts = {v["name"] for v in pod["spec"]["volumes"]}
        assert all(vm["name"] in mounts for c in containers for vm in c.get("volumeMounts", []))
        hpa = by_kind["HorizontalPodAutoscaler"][name]
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        assert by_kind["PodDisruptionBudget"][name]["spec"]["selector"]["matchLabels"].items() <= labels.items()
        if name in pools:
            (triton,) = pod["spec"]["containers"]
            loaded = [a.split("=", 1)[1] for a in triton["args"] if a.startswith("--load-model=")]
            assert loaded and set(loaded) <= models_on_disk
            buckets = sorted({int(x.split("_")[1]) for x in loaded})
            served_buckets += buckets
            assert {f"bert_{b}_encoder" for b in buckets} <= set(loaded)
            live = triton["livenessProbe"]["exec"]["command"]
            assert live[:2] == ["embtrt", "probe"] and "--no-expand" in live
            assert {live[i + 1] for i, a in enumerate(live) if a == "--model"} <= set(loaded)
            assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == QUEUE_METRIC
            inits = [c["name"] for c in pod["spec"]["initContainers"]]
            gpu = triton["resources"]["limits"].get("nvidia.com/gpu")
            if kind == "trt":
                assert inits == ["copy-repository", "engines"] and gpu == "1"
                assert pod["spec"]["initContainers"][1]["command"] == ["embtrt", "engines", "/models"]
            else:
                assert inits == ["copy-repository"] and gpu is None
    assert sorted(served_buckets) == sorted(m["buckets"])  # every bucket in exactly one pool

    gw = deploys["bert-gateway"]["spec"]["template"]
    cmd = gw["spec"]["containers"][0]["command"]
    routes = {int(cmd[i + 1].split("=")[0]): cmd[i + 1].split("=")[1] for i, a in enumerate(cmd) if a == "--pool"}
    assert sorted(routes) == sorted(m["buckets"])
    for b, target in routes.items():
        host, port = target.split(":")
        assert host in pools and int(port) == GRPC and b in served_buckets
        assert any(p["port"] == GRPC for p in by_kind["Service"][host]["spec"]["ports"])
    netpol = next(iter(by_kind["NetworkPolicy"].values()))
    sel = netpol["spec"]["podSelector"]["matchLabels"]
    assert all(sel.items() <= d["spec"]["template"]["metadata"]["labels"].items() for d in pools.values())
    assert not sel.items() <= gw["metadata"]["labels"].items()
    frm = netpol["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert frm.items() <= gw["metadata"]["labels"].items()
    assert {p["port"] for p in netpol["spec"]["ingress"][0]["ports"]} == {8000, 8001}
    rules = yaml.safe_load(by_kind["ConfigMap"]["bert-prometheus-adapter-rules"]["data"]["config.yaml"])
    assert rules["rules"][0]["name"]["as"] == QUEUE_METRIC


def test_strict_validation_has_teeth(repos, tmp_path):
    files = rendered(repos["cpu"], tmp_path / "out")
    d = copy.deepcopy(files["bert-pool-32.yaml"][0])
    d["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}  # a typo'd field
    with pytest.raises(kv.ValidationError):
        kv.validate(d, versions()[-1], strict=True)


def test_unknown_pool_edge_is_refused(repos, tmp_path):
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "k8s", str(repos["cpu"]), "--out", str(tmp_path / "o"),
                        "--pools", "100"], capture_output=True, text=True)
    assert p.returncode == 2 and "not buckets" in p.stderr


def test_two_models_get_pools_of_their_own_behind_one_gateway(repos, tiny_models, tmp_path):
    """Two repositories (two models): every document validates strictly; each model's pools load its
    own models from its own claim; the gateway mounts both claims and routes MODEL:BUCKET to services
    that exist; the NetworkPolicy covers every pool."""
    other = tmp_path / "xlmr"
    build(spec_from_options(tiny_models["xlmr-mean"], other, name="xlmr"), log=lambda m: None)
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "k8s", str(repos["cpu"]), str(other), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    files = {f.name: [d for d in yaml.safe_load_all(f.read_text()) if d] for f in sorted((tmp_path / "out").glob("*.yaml"))}
    docs = [d for name, ds in files.items() if name != "kustomization.yaml" for d in ds]
    for d in docs:
        kv.validate(json.loads(json.dumps(d)), versions()[-1], strict=True)
    by_kind: dict[str, dict[str, dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    deploys = by_kind["Deployment"]
    want = {"bert": (repos["cpu"], "bert-repository"), "xlmr": (other, "xlmr-repository")}
    pools = {n: d for n, d in deploys.items() if "-pool-" in n}
    for model, (repo, claim) in want.items():
        buckets = json.loads((repo / "embtrt.json").read_text())["buckets"]
        mine = {n: d for n, d in pools.items() if n.startswith(f"{model}-pool-")}
        assert sorted(mine) == sorted(f"{model}-pool-{b}" for b in buckets)
        on_disk = {q.parent.name for q in repo.glob("*/config.pbtxt")}
        for d in mine.values():
            pod = d["spec"]["template"]["spec"]
            assert [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v] == [claim]
            loaded = {a.split("=", 1)[1] for a in pod["containers"][0]["args"] if a.startswith("--load-model=")}
            assert loaded and loaded <= on_disk
    gw = deploys["bert-gateway"]["spec"]["template"]["spec"]
    cmd = gw["containers"][0]["command"]
    assert cmd[:4] == ["embtrt", "gateway", "/repositories/bert", "/repositories/xlmr"]
    claims = {v["persistentVolumeClaim"]["claimName"] for v in gw["volumes"] if "persistentVolumeClaim" in v}
    assert claims == {"bert-repository", "xlmr-repository"}
    routes = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--pool"]
    for r in routes:
        model_bucket, target = r.split("=")
        model, bucket = model_bucket.split(":")
        host, port = target.split(":")
        assert host == f"{model}-pool-{bucket}" and host in by_kind["Service"] and int(port) == GRPC
    assert len(routes) == sum(len(json.loads((r / "embtrt.json").read_text())["buckets"]) for r, _ in want.values())
    sel = next(iter(by_kind["NetworkPolicy"].values()))["spec"]["podSelector"]["matchLabels"]
    assert all(sel.items() <= d["spec"]["template"]["metadata"]["labels"].items() for d in pools.values())
    # the same name twice is refused
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "k8s", str(repos["cpu"]), str(repos["cpu"]), "--out",
                        str(tmp_path / "o2")], capture_output=True, text=True)
    assert p.returncode == 2 and "model names repeat" in p.stderr
