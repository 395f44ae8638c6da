"""`embtrt k8s` renders plain YAML that validates strictly offline, whose parts refer to each other,
whose every pod passes Pod Security "restricted", and that refuses a repository the pool image
cannot serve."""

import copy
import json
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from waiting import until

from embtrt.errors import SpecError
from embtrt.export import build
from embtrt.export.spec import Gate
from embtrt.export.spec_options import spec_from_options
from embtrt.scale.k8s import GRPC, POOL_IMAGE, QUEUE_METRIC, K8sSpec, image_python, plan_pools, write

kv = pytest.importorskip("kubernetes_validate")  # a dev dependency (make install)

PY = f"{sys.version_info.major}.{sys.version_info.minor}"  # the tiny repositories' bundles are built for it
OTHER_PY = "3.12" if PY != "3.12" else "3.10"
STANDIN = "localhost/embtrt-pool:standin"   # a tag that names no NGC release


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


def load(out: Path) -> dict[str, list[dict]]:
    return {f.name: [d for d in yaml.safe_load_all(f.read_text()) if d] for f in sorted(out.glob("*.yaml"))}


ENGINES = "localhost/embtrt-engines:standin"


def rendered(repo: Path, out: Path, **kw) -> dict[str, list[dict]]:
    kw.setdefault("image", STANDIN)
    kw.setdefault("server_python", PY)
    if json.loads((repo / "embtrt.json").read_text())["target"] == "tensorrt":
        kw.setdefault("engines_image", ENGINES)
    write(K8sSpec(repo, out, **kw), log=lambda m: None)
    return load(out)


def by_kind(files: dict[str, list[dict]]) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for name, ds in files.items():
        for d in ds:
            if name != "kustomization.yaml":
                out.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    return out


# --- Pod Security Standards, "restricted" (Kubernetes 1.30+), every rule, read from the pod spec ---

RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def restricted_violations(pod: dict, annotations: dict | None = None) -> list[str]:
    """The rules of the "restricted" profile (baseline's included) that this pod spec breaks."""
    out = []
    psc = pod.get("securityContext") or {}
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(f):
            out.append(f"host namespaces: {f}")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("hostProcess: pod")
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume types: {v['name']} is {', '.join(sorted(kinds))}")
    for s in psc.get("sysctls") or []:
        if s["name"] not in SAFE_SYSCTLS:
            out.append(f"sysctls: {s['name']}")
    if psc.get("runAsUser") == 0:
        out.append("runAsUser: pod runs as 0")
    if psc.get("seccompProfile", {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
        out.append("seccomp: pod profile")
    for key, val in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                val == "runtime/default" or val.startswith("localhost/")):
            out.append(f"AppArmor: {key}")
    containers = pod.get("initContainers", []) + pod["containers"] + pod.get("ephemeralContainers", [])
    for c in containers:
        n, sc = c["name"], c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"privileged: {n}")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"allowPrivilegeEscalation: {n}")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            out.append(f"runAsNonRoot: {n}")
        if sc.get("runAsUser") == 0:
            out.append(f"runAsUser: {n} runs as 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"seccomp: {n} has {seccomp}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"capabilities: {n} does not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"capabilities: {n} adds {caps['add']}")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            out.append(f"hostPorts: {n}")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"procMount: {n}")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"hostProcess: {n}")
        se = sc.get("seLinuxOptions") or psc.get("seLinuxOptions") or {}
        if se.get("type") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(f"SELinux: {n}")
        if (sc.get("appArmorProfile") or psc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            out.append(f"AppArmor: {n}")
    return out


def pods_of(files: dict[str, list[dict]]) -> list[tuple[str, dict, dict]]:
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"], d["spec"]["template"]["metadata"].get("annotations", {}))
            for ds in files.values() for d in ds if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job", "Pod")]


# --- tests ---

def test_pools_split_the_buckets_by_their_upper_edges():
    assert plan_pools([32, 128, 512, 2048], ()) == [(32,), (128,), (512,), (2048,)]
    assert plan_pools([32, 128, 512, 2048], (128,)) == [(32, 128), (512, 2048)]
    with pytest.raises(Exception, match="not buckets"):
        plan_pools([32, 128], (100,))


def test_ngc_release_tags_name_their_python():
    assert image_python("nvcr.io/nvidia/tritonserver:25.06-py3") == "3.12"
    assert image_python("nvcr.io/nvidia/tritonserver:24.12-py3") == "3.10"
    assert image_python(POOL_IMAGE) == "3.12"   # what `make images` builds FROM 25.06
    assert image_python("reg/x/embtrt-pool:0.1.0-tritonserver-24.08@sha256:" + "a" * 64) == "3.10"
    assert image_python(STANDIN) is None and image_python("nvcr.io/nvidia/tritonserver:30.01-py3") is None


def test_the_default_pool_image_refuses_a_bundle_built_for_another_python(repos, tmp_path):
    """The default pool image runs NGC 25.06's Python 3.12; a repository bundled for this Python (3.11 on
    the build machine) is refused by the CLI, naming the command that rebuilds it, and nothing is written."""
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "k8s", str(repos["cpu"]), "--out", str(out),
                        "--image", "nvcr.io/nvidia/tritonserver:25.06-py3"], capture_output=True, text=True)
    if PY == "3.12":
        pytest.skip("this interpreter is the image's Python 3.12: no mismatch to refuse")
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"built for Python {PY}" in p.stderr and "--server-python 3.12" in p.stderr
    assert "embtrt build" in p.stderr and not out.exists()
    # #73: the hinted command builds into a new folder (pasted as printed it failed on the existing --out,
    # and --force would have replaced the repository being served)
    hint = " ".join(p.stderr.split())
    new = re.search(r"--out (\S+)", hint)
    assert new and new.group(1) == f"{str(repos['cpu']).rstrip('/')}-py3.12" and " --force" not in hint, hint
    assert not Path(new.group(1)).exists()
    with pytest.raises(SpecError, match=f"built for Python {PY}.*server runs Python {OTHER_PY}"):
        write(K8sSpec(repos["cpu"], tmp_path / "o2", image=STANDIN, server_python=OTHER_PY), log=lambda m: None)
    with pytest.raises(SpecError, match="NGC's release of Python 3.12"):  # a name that contradicts --server-python
        write(K8sSpec(repos["cpu"], tmp_path / "o4", image="nvcr.io/nvidia/tritonserver:25.06-py3", server_python=PY),
              log=lambda m: None)
    with pytest.raises(SpecError, match="cannot tell which Python"):
        write(K8sSpec(repos["cpu"], tmp_path / "o3", image=STANDIN), log=lambda m: None)
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()


def test_the_cli_renders_the_project_images_and_passes_its_options(repos, tmp_path):
    """`embtrt k8s` without --image renders the images `make images` builds (and refuses a bundle for another
    Python than theirs); --server-python, --tls-secret and --gateway-replicas reach the manifests."""
    from embtrt.scale.k8s import GATEWAY_IMAGE

    cli = [sys.executable, "-m", "embtrt.cli", "k8s", str(repos["cpu"])]
    p = subprocess.run([*cli, "--out", str(tmp_path / "default")], capture_output=True, text=True)
    if PY != "3.12":
        assert p.returncode == 2 and f"built for Python {PY}" in p.stderr and "--server-python 3.12" in p.stderr, p.stderr
    p = subprocess.run([*cli, "--out", str(tmp_path / "out"), "--image", STANDIN, "--server-python", PY, "--tls-secret", "t",
                        "--gateway-replicas", "3", "--pool-cpu", "1500m", "--pool-memory", "6Gi"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    kinds = by_kind(load(tmp_path / "out"))
    # #73: the pool pods' size is an option (was fixed at 4 CPU / 16Gi)
    res = kinds["Deployment"]["bert-pool-32"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res["requests"]["cpu"] == res["limits"]["cpu"] == "1500m" and res["limits"]["memory"] == "6Gi", res
    bad = subprocess.run([*cli, "--out", str(tmp_path / "bad"), "--image", STANDIN, "--server-python", PY,
                          "--pool-memory", "lots"], capture_output=True, text=True)
    assert bad.returncode != 0 and "invalid pool_memory: 'lots'" in bad.stderr, bad.stderr
    gw = kinds["Deployment"]["bert-gateway"]
    assert gw["spec"]["replicas"] == 3 and gw["spec"]["template"]["spec"]["containers"][0]["image"] == GATEWAY_IMAGE
    pool = kinds["Deployment"]["bert-pool-32"]["spec"]["template"]["spec"]
    assert pool["containers"][0]["image"] == STANDIN and {"name": "tls", "secret": {"secretName": "t", "defaultMode": 0o440,
                                                                                      "optional": False}} in pool["volumes"]


@pytest.mark.parametrize("kind", ["cpu", "trt"])
def test_every_document_validates_strictly_and_refers_to_things_that_exist(repos, tmp_path, kind):
    repo = repos[kind]
    files = rendered(repo, tmp_path / "out", pools=(32,))
    m = json.loads((repo / "embtrt.json").read_text())
    docs = [d for name, ds in files.items() if name != "kustomization.yaml" for d in ds]
    vs = versions()
    assert vs[0] == "1.30.0" and len(vs) >= 8
    for d in docs:
        for v in vs:
            kv.validate(json.loads(json.dumps(d)), v, strict=True)
    assert sorted(files["kustomization.yaml"][0]["resources"]) == sorted(n for n in files if n != "kustomization.yaml")

    kinds = by_kind(files)
    deploys = kinds["Deployment"]
    pools = {n: d for n, d in deploys.items() if "-pool-" in n}
    assert sorted(pools) == ["bert-pool-32", "bert-pool-64"]
    models_on_disk = {p.parent.name for p in repo.glob("*/config.pbtxt")}
    served_buckets = []
    for name, d in deploys.items():
        pod = d["spec"]["template"]
        labels = pod["metadata"]["labels"]
        assert d["spec"]["selector"]["matchLabels"].items() <= labels.items()
        svc = kinds["Service"][name]
        assert svc["spec"]["selector"].items() <= labels.items()
        containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        port_names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= port_names
        for c in containers:
            assert c["resources"]["requests"] == c["resources"]["limits"] and c["resources"]["limits"]["memory"]
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if "httpGet" in c.get(probe, {}):
                    assert c[probe]["httpGet"]["port"] in port_names
            for e in c.get("env", []):  # every Secret referenced exists, with that key
                if "value" in e:
                    continue
                ref = e["valueFrom"]["secretKeyRef"]
                assert ref["key"] in kinds["Secret"][ref["name"]]["stringData"]
        mounts = {v["name"] for v in pod["spec"]["volumes"]}
        assert all(vm["name"] in mounts for c in containers for vm in c.get("volumeMounts", []))
        hpa = kinds["HorizontalPodAutoscaler"][name]
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        pdb = kinds["PodDisruptionBudget"][name]["spec"]
        assert pdb["selector"]["matchLabels"].items() <= labels.items()
        assert pdb == {"maxUnavailable": 1, "selector": pdb["selector"]}   # never minAvailable: drains go on
        if name in pools:
            (triton,) = pod["spec"]["containers"]
            loaded = [a.split("=", 1)[1] for a in triton["args"] if a.startswith("--load-model=")]
            assert loaded and set(loaded) <= models_on_disk
            buckets = sorted({int(x.split("_")[1]) for x in loaded})
            served_buckets += buckets
            assert {f"bert_{b}_encoder" for b in buckets} <= set(loaded)
            # liveness: the repository's own stdlib checker, in the copy the init container makes
            live = triton["livenessProbe"]["exec"]["command"]
            assert live[0] == "python3" and "--repository" in live and live[live.index("--repository") + 1] == "/models"
            script = next(a for a in live if a.endswith("liveness.py"))
            assert script.startswith("/models/") and (repo / script.removeprefix("/models/")).is_file()
            assert script.split("/")[2] in loaded and "probe" not in live
            assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == QUEUE_METRIC
            # Triton's admin APIs answer only with the admin header, whose value comes from the Secret
            env = {e["name"]: e for e in triton["env"]}
            for flag in ("--http-restricted-api=", "--grpc-restricted-protocol="):
                (arg,) = [a for a in triton["args"] if a.startswith(flag)]
                apis, header = arg.removeprefix(flag).split(":")
                assert set(apis.split(",")) == {"model-repository", "logging", "shared-memory", "trace"}
                key, value = header.split("=")
                assert key and value.startswith("$(") and "secretKeyRef" in env[value[2:-1]]["valueFrom"]
            # the root filesystem is read-only: HOME and the Hugging Face cache (where transformers copies a
            # trusted model's own code) are on the writable /tmp emptyDir, and nothing reaches for the Hub
            scratch = {vm["mountPath"]: vm for vm in triton["volumeMounts"]}["/tmp"]
            assert not scratch.get("readOnly") and "emptyDir" in {v["name"]: v for v in pod["spec"]["volumes"]}[scratch["name"]]
            assert triton["securityContext"]["readOnlyRootFilesystem"] is True
            assert env["HOME"]["value"] == "/tmp" and env["HF_HOME"]["value"].startswith("/tmp/")
            assert env["HF_HUB_OFFLINE"]["value"] == env["TRANSFORMERS_OFFLINE"]["value"] == "1"
            inits = [c["name"] for c in pod["spec"]["initContainers"]]
            gpu = triton["resources"]["limits"].get("nvidia.com/gpu")
            if kind == "trt":
                assert inits == ["copy-repository", "engines"] and gpu == "1"
                assert pod["spec"]["initContainers"][1]["command"] == ["embtrt", "engines", "/models"]
                assert {"name": "HOME", "value": "/tmp"} in pod["spec"]["initContainers"][1]["env"]
                assert pod["spec"]["initContainers"][1]["image"] == ENGINES
            else:
                assert inits == ["copy-repository"] and gpu is None
    assert sorted(served_buckets) == sorted(m["buckets"])  # every bucket in exactly one pool

    gw = deploys["bert-gateway"]["spec"]["template"]
    (gcont,) = gw["spec"]["containers"]
    cmd = gcont["command"]
    routes = {int(cmd[i + 1].split("=")[0]): cmd[i + 1].split("=")[1] for i, a in enumerate(cmd) if a == "--pool"}
    assert sorted(routes) == sorted(m["buckets"])
    for b, target in routes.items():
        host, port = target.split(":")
        assert host in pools and int(port) == GRPC and b in served_buckets
        assert any(p["port"] == GRPC for p in kinds["Service"][host]["spec"]["ports"])
    # the API key: --api-key-env names a variable filled from the generated Secret
    var = cmd[cmd.index("--api-key-env") + 1]
    (env,) = [e for e in gcont["env"] if e["name"] == var]
    key = kinds["Secret"][env["valueFrom"]["secretKeyRef"]["name"]]["stringData"]["api-key"]
    assert len(key) >= 32
    assert stat.S_IMODE((tmp_path / "out" / "secrets.yaml").stat().st_mode) == 0o600

    pols = kinds["NetworkPolicy"]
    glabels = gw["metadata"]["labels"]
    a_pool = next(iter(pools.values()))["spec"]["template"]["metadata"]["labels"]
    pool_pol = next(p for p in pols.values() if p["spec"]["podSelector"]["matchLabels"].items() <= a_pool.items())
    sel = pool_pol["spec"]["podSelector"]["matchLabels"]
    assert all(sel.items() <= d["spec"]["template"]["metadata"]["labels"].items() for d in pools.values())
    assert not sel.items() <= glabels.items()
    frm = pool_pol["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert frm.items() <= glabels.items()
    assert {p["port"] for p in pool_pol["spec"]["ingress"][0]["ports"]} == {GRPC}
    assert pool_pol["spec"]["policyTypes"] == ["Ingress", "Egress"] and pool_pol["spec"]["egress"] == []
    gw_pol = next(p for p in pols.values() if p["spec"]["podSelector"]["matchLabels"].items() <= glabels.items())
    assert {p["port"] for r in gw_pol["spec"]["ingress"] for p in r["ports"]} == {8080}
    to_pools = gw_pol["spec"]["egress"][0]
    assert to_pools["to"][0]["podSelector"] == pool_pol["spec"]["podSelector"] and to_pools["ports"][0]["port"] == GRPC
    rules = yaml.safe_load(kinds["ConfigMap"]["bert-prometheus-adapter-rules"]["data"]["config.yaml"])
    assert rules["rules"][0]["name"]["as"] == QUEUE_METRIC


@pytest.mark.parametrize("kind", ["cpu", "trt"])
def test_every_pod_passes_the_restricted_pod_security_profile(repos, tmp_path, kind):
    files = rendered(repos[kind], tmp_path / "out", tls_secret="bert-tls")
    pods = pods_of(files)
    assert len(pods) == len(json.loads((repos[kind] / "embtrt.json").read_text())["buckets"]) + 1
    for name, pod, ann in pods:
        assert restricted_violations(pod, ann) == [], name
        # beyond the profile: no service-account token, scratch volumes sized, images as given
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for v in pod["volumes"]:
            if "emptyDir" in v:
                assert v["emptyDir"]["sizeLimit"].endswith(("Gi", "Mi")), (name, v)
        for c in pod.get("initContainers", []) + pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["runAsUser"] == 1000
            assert c["resources"]["limits"]["ephemeral-storage"]


def test_the_restricted_check_catches_each_rule_broken(repos, tmp_path):
    """The checker above is what the previous test trusts: each planted breach of the profile is found."""
    (_, pod, _), *_ = pods_of(rendered(repos["trt"], tmp_path / "out"))
    assert restricted_violations(pod) == []
    init = "initContainers"
    plants = {
        "host namespaces": lambda p: p.update(hostNetwork=True),
        "volume types": lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "allowPrivilegeEscalation": lambda p: p[init][1]["securityContext"].pop("allowPrivilegeEscalation"),
        "privileged": lambda p: p["containers"][0]["securityContext"].update(privileged=True),
        "runAsNonRoot": lambda p: [c["securityContext"].pop("runAsNonRoot") for c in p[init]] and p["securityContext"].pop("runAsNonRoot"),
        "runAsUser": lambda p: p[init][0]["securityContext"].update(runAsUser=0),
        "seccomp": lambda p: p["containers"][0]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "capabilities": lambda p: p[init][0]["securityContext"].update(capabilities={"add": ["SYS_ADMIN"], "drop": ["ALL"]}),
        "hostPorts": lambda p: p["containers"][0]["ports"][0].update(hostPort=8000),
        "sysctls": lambda p: p["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
        "procMount": lambda p: p["containers"][0]["securityContext"].update(procMount="Unmasked"),
        "SELinux": lambda p: p["containers"][0]["securityContext"].update(seLinuxOptions={"type": "spc_t"}),
    }
    for rule, plant in plants.items():
        broken = copy.deepcopy(pod)
        plant(broken)
        found = restricted_violations(broken)
        assert found and all(f.startswith(rule) for f in found), (rule, found)
    # without seccomp at the pod level and on a container, that container breaks the rule
    broken = copy.deepcopy(pod)
    broken["securityContext"].pop("seccompProfile")
    broken["containers"][0]["securityContext"].pop("seccompProfile")
    assert restricted_violations(broken) == ["seccomp: tritonserver has None"]


def test_tls_mounts_the_certificate_secret_for_triton_grpc_and_the_gateway(repos, tmp_path):
    files = rendered(repos["cpu"], tmp_path / "out", tls_secret="bert-tls")
    kinds = by_kind(files)
    for name, pod, _ in pods_of(files):
        (tls,) = [v for v in pod["volumes"] if v["name"] == "tls"]
        assert tls["secret"]["secretName"] == "bert-tls"
        c = pod["containers"][0]
        (mount,) = [m for m in c["volumeMounts"] if m["name"] == "tls"]
        assert mount["readOnly"] is True
        words = c.get("args", []) + c.get("command", [])
        paths = [w.split("=", 1)[-1] for w in words if w.startswith("/etc/embtrt/tls/") or "=/etc/embtrt/tls/" in w]
        assert paths and all(p.startswith(mount["mountPath"] + "/") for p in paths), name
        if "-pool-" in name:
            assert "--grpc-use-ssl=true" in c["args"]
        else:
            assert {"--tls-cert", "--tls-key", "--pool-tls-ca"} <= set(c["command"])
            assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    plain = rendered(repos["cpu"], tmp_path / "plain")
    assert not any("tls" in json.dumps(pod) for _, pod, _ in pods_of(plain))
    assert "bert-tls" not in kinds.get("Secret", {})  # the certificate Secret is the user's, never rendered


def test_rerendering_writes_a_clean_folder_and_keeps_the_generated_keys(repos, tmp_path):
    out = tmp_path / "out"
    first = rendered(repos["cpu"], out, pools=(32,))
    assert {"bert-pool-32.yaml", "bert-pool-64.yaml"} <= set(first)
    keys = {n: s["stringData"] for n, s in by_kind(first)["Secret"].items()}
    second = rendered(repos["cpu"], out, pools=(64,))
    assert "bert-pool-32.yaml" not in second and (out / "bert-pool-64.yaml").is_file()
    assert sorted(p.name for p in out.glob("*.yaml")) == sorted(second["kustomization.yaml"][0]["resources"] + ["kustomization.yaml"])
    assert {n: s["stringData"] for n, s in by_kind(second)["Secret"].items()} == keys
    # a fresh folder gets fresh keys
    other = rendered(repos["cpu"], tmp_path / "other")
    assert by_kind(other)["Secret"]["bert-gateway-api-key"]["stringData"] != keys["bert-gateway-api-key"]


def test_a_folder_that_is_not_a_previous_render_is_refused_untouched(repos, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.yaml").write_text("keep: me\n")
    with pytest.raises(SpecError, match="did not write"):
        rendered(repos["cpu"], mine)
    assert [p.name for p in mine.iterdir()] == ["notes.yaml"]
    out = tmp_path / "out"
    rendered(repos["cpu"], out)
    (out / "extra.txt").write_text("mine")
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(SpecError, match="extra.txt"):
        rendered(repos["cpu"], out, pools=(32,))
    assert sorted(p.name for p in out.iterdir()) == before and (out / "extra.txt").read_text() == "mine"


def test_a_tensorrt_repository_needs_an_engines_image(repos, tmp_path):
    """The pool image has no `embtrt engines`: a TensorRT render without --engines-image could not start."""
    with pytest.raises(SpecError, match="engines-image"):
        rendered(repos["trt"], tmp_path / "out", engines_image=None)
    assert not (tmp_path / "out").exists()


def test_strict_validation_has_teeth(repos, tmp_path):
    files = rendered(repos["cpu"], tmp_path / "out")
    d = copy.deepcopy(files["bert-pool-32.yaml"][0])
    d["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}  # a typo'd field
    with pytest.raises(kv.ValidationError):
        kv.validate(d, versions()[-1], strict=True)


def test_unknown_pool_edge_is_refused(repos, tmp_path):
    with pytest.raises(SpecError, match="not buckets"):
        rendered(repos["cpu"], tmp_path / "o", pools=(100,))


def test_images_by_digest_are_kept_as_given(repos, tmp_path):
    digest = "reg.example/embtrt-pool@sha256:" + "0123456789abcdef" * 4
    files = rendered(repos["cpu"], tmp_path / "out", image=digest)
    pod = by_kind(files)["Deployment"]["bert-pool-32"]["spec"]["template"]["spec"]
    assert {c["image"] for c in pod["initContainers"] + pod["containers"]} == {digest}
    with pytest.raises(SpecError, match="invalid image"):
        K8sSpec(repos["cpu"], tmp_path / "x", image="reg/x@sha256:abc")


def test_two_models_get_pools_of_their_own_behind_one_gateway(repos, tiny_models, tmp_path):
    """Two repositories (two models): every document validates strictly; each model's pools load its
    own models from its own claim; the gateway mounts both claims and routes MODEL:BUCKET to services
    that exist; the NetworkPolicy covers every pool."""
    other = tmp_path / "xlmr"
    build(spec_from_options(tiny_models["xlmr-mean"], other, name="xlmr"), log=lambda m: None)
    files = rendered(repos["cpu"], tmp_path / "out", more_repositories=(other,))
    docs = [d for name, ds in files.items() if name != "kustomization.yaml" for d in ds]
    for d in docs:
        kv.validate(json.loads(json.dumps(d)), versions()[-1], strict=True)
    kinds = by_kind(files)
    deploys = kinds["Deployment"]
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
            script = next(a for a in pod["containers"][0]["livenessProbe"]["exec"]["command"] if a.endswith("liveness.py"))
            assert script.split("/")[2] in loaded
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
        assert host == f"{model}-pool-{bucket}" and host in kinds["Service"] and int(port) == GRPC
    assert len(routes) == sum(len(json.loads((r / "embtrt.json").read_text())["buckets"]) for r, _ in want.values())
    pool_pol = kinds["NetworkPolicy"]["bert-pools-from-gateway"]
    sel = pool_pol["spec"]["podSelector"]["matchLabels"]
    assert all(sel.items() <= d["spec"]["template"]["metadata"]["labels"].items() for d in pools.values())
    for _, pod, ann in pods_of(files):
        assert restricted_violations(pod, ann) == []
    # the same name twice is refused
    with pytest.raises(SpecError, match="model names repeat"):
        rendered(repos["cpu"], tmp_path / "o2", more_repositories=(repos["cpu"],))


def test_a_reranker_and_a_sparse_encoder_get_one_pool_each_beside_an_embedder(repos, rerank_repos, splade, classifier_repos,
                                                                              multivector_repos, clip_repos, tmp_path):
    """A reranker's and a sparse encoder's front door plans every bucket itself: each kind is one pool
    that loads its front door (a model on disk, with its liveness checker) and, built with bls, the
    bucket encoders it calls; every bucket of it routed there by the gateway; an embedder beside them
    keeps its length pools (a classifier, #51, a multi-vector encoder, #52, and a text-and-image embedder, #53, as
    the reranker). A --pools split
    of such a kind is refused naming it."""
    rr, sp, rb, cl = rerank_repos["bert-ce"], splade[1], rerank_repos["qwen3-ce"], classifier_repos["bert-cls3"]
    mv, mm = multivector_repos["colbert"], clip_repos["clip"]
    files = rendered(repos["cpu"], tmp_path / "out", more_repositories=(rr, sp, rb, cl, mv, mm))
    for name, ds in files.items():
        if name != "kustomization.yaml":
            for d in ds:
                kv.validate(json.loads(json.dumps(d)), versions()[-1], strict=True)
    kinds = by_kind(files)
    pools = {n: d for n, d in kinds["Deployment"].items() if "-pool-" in n}
    cmd = kinds["Deployment"]["bert-gateway"]["spec"]["template"]["spec"]["containers"][0]["command"]
    routes = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--pool"]
    for repo in (rr, sp, rb, cl, mv, mm):
        m = json.loads((repo / "embtrt.json").read_text())
        app = m["name"].replace("_", "-")
        mine = {n: d for n, d in pools.items() if n.startswith(f"{app}-pool-")}
        assert list(mine) == [f"{app}-pool-{max(m['buckets'])}"], (m["kind"], sorted(pools))
        c = next(iter(mine.values()))["spec"]["template"]["spec"]["containers"][0]
        loads = [m["name"], *m["models"]["encoders"]]
        assert [a for a in c["args"] if a.startswith("--load-model=")] == [f"--load-model={x}" for x in loads]
        assert all((repo / x / "config.pbtxt").is_file() for x in loads)
        assert len(loads) == (1 if repo != rb else 1 + len(m["buckets"]))
        script = next(a for a in c["livenessProbe"]["exec"]["command"] if a.endswith("liveness.py"))
        assert (repo / script.removeprefix("/models/")).is_file()
        assert sorted(r for r in routes if r.startswith(m["name"] + ":")) == sorted(
            f"{m['name']}:{b}={app}-pool-{max(m['buckets'])}:{GRPC}" for b in m["buckets"])
    assert len([n for n in pools if n.startswith("bert-pool-")]) == len(json.loads((repos["cpu"] / "embtrt.json").read_text())["buckets"])
    for _, pod, ann in pods_of(files):
        assert restricted_violations(pod, ann) == []
    buckets = json.loads((rr / "embtrt.json").read_text())["buckets"]
    if len(buckets) > 1:
        with pytest.raises(SpecError, match="one pool"):
            rendered(rr, tmp_path / "o2", pools=(buckets[0],))


def test_pools_of_a_repository_built_for_cuda_request_a_gpu_as_tensorrt_pools_do():
    from embtrt.repository.manifest import Manifest
    from embtrt.scale.k8s.pools import wants_gpu

    base = {"schema_version": 3, "identity": {}, "name": "m", "kind": "embedder",
            "models": {"front_door": "m", "ensembles": ["m_32"], "encoders": ["m_32_encoder"]},
            "pooling": "mean", "normalize": True, "dim": 8, "buckets": [32], "max_seq_length": 32,
            "overflow": "truncate", "precision": "fp16", "backend_profile": "x", "pooler": "fused",
            "input_names": ["input_ids", "attention_mask"], "encoder_output": "embedding", "pad_id": 0,
            "max_batch_size": 8, "max_batch_tokens": 256, "bucket_max_batch": {"32": 8}, "server_python": "3.12"}
    assert wants_gpu(Manifest.from_dict({**base, "target": "python-torch", "spec": {"device": "cuda"}}))
    assert wants_gpu(Manifest.from_dict({**base, "target": "onnxruntime", "spec": {"device": "cuda"}}))
    assert wants_gpu(Manifest.from_dict({**base, "target": "tensorrt", "spec": {}}))
    assert not wants_gpu(Manifest.from_dict({**base, "target": "python-torch", "spec": {"device": "cpu"}}))
    assert not wants_gpu(Manifest.from_dict({**base, "target": "python-ort", "spec": {}}))


def test_pool_pods_drain_before_tritonserver_stops(repos, tmp_path):
    """The pool container's preStop serves --drain-grace, raises the drain flag its Python models
    read (EMBTRT_DRAIN_FILE, on the /tmp emptyDir), then waits for the calls they are running;
    kubelet's grace period covers all of it and tritonserver's exit. The command itself is run
    here in sh against the models' own drain marker."""
    import os
    import shutil

    from embtrt.scale.k8s.pools import DRAIN_WAIT_S, TRITON_EXIT_S, pre_stop
    from embtrt_backend.drain import Drain

    pod = by_kind(rendered(repos["cpu"], tmp_path / "out", drain_grace_s=7))["Deployment"]["bert-pool-32"]
    pod = pod["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["EMBTRT_DRAIN_FILE"].startswith("/tmp/") and {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    cmd = c["lifecycle"]["preStop"]["exec"]["command"]
    assert cmd == pre_stop(7) and cmd[2].startswith("sleep 7;")
    assert pod["terminationGracePeriodSeconds"] >= 7 + DRAIN_WAIT_S + TRITON_EXIT_S

    flag = tmp_path / "drain"
    shim = tmp_path / "bin"             # `sleep` as the command calls it, each call logged: the loop's polls are seen
    shim.mkdir()
    log = tmp_path / "sleeps"
    (shim / "sleep").write_text(f'#!/bin/sh\necho "$1" >> "{log}"\nexec {shutil.which("sleep")} "$@"\n')
    (shim / "sleep").chmod(0o755)
    env = {**os.environ, "EMBTRT_DRAIN_FILE": str(flag), "PATH": f"{shim}:{os.environ['PATH']}"}
    os.environ["EMBTRT_DRAIN_FILE"] = str(flag)
    try:
        model = Drain(track=True)          # a Python model of the pod, one call running
        assert model.begin()
        p = subprocess.Popen(pre_stop(0), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            polls = lambda: log.read_text().split().count("0.1") if log.exists() else 0
            until(lambda: polls() >= 2 or p.poll() is not None, 30, "the preStop command polling or exiting")
            assert p.poll() is None, "preStop returned while a call was still running"
            model.end()                    # the call returns: the command's next poll finds nothing listed
            out, err = p.communicate(timeout=DRAIN_WAIT_S + 10)
        finally:
            p.kill()
    finally:
        del os.environ["EMBTRT_DRAIN_FILE"]
    assert p.returncode == 0, err
    assert flag.exists() and not model.begin()   # new calls refused from the flag on
    assert polls() < DRAIN_WAIT_S * 10           # it stopped at the call's end, not at its own bound



def test_the_pre_stop_waits_for_an_instance_not_scheduled_when_the_flag_is_raised(tmp_path):
    """A pod's Python model instance that has not run since the flag was raised may be running a call it has not
    listed yet: the preStop waits for its acknowledgement (embtrt_backend.drain), and returns once it has."""
    import os
    import signal
    import sys
    import time

    from embtrt.scale.k8s.pools import pre_stop
    from embtrt_backend import drain

    flag = tmp_path / "drain"
    backend = os.path.dirname(os.path.dirname(os.path.abspath(drain.__file__)))
    stub = subprocess.Popen([sys.executable, "-c", f"import sys, time; sys.path.insert(0, {backend!r}); "
                             f"from embtrt_backend.drain import Drain; d = Drain({str(flag)!r}, track=True); "
                             "print(d.name, flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert stub.stdout.readline().strip().startswith(f"{stub.pid}-")
        os.kill(stub.pid, signal.SIGSTOP)
        # an instance of a container since restarted (the emptyDir keeps its registration) whose pid this process
        # has taken: its start time tells it apart, and it is not waited for
        (flag.parent / "drain.instances" / f"{os.getpid()}-0").write_text(str(int(drain.started()) - 1))
        p = subprocess.Popen(pre_stop(0), env={**os.environ, "EMBTRT_DRAIN_FILE": str(flag)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            until(flag.exists, 30, "the preStop raising the flag")
            time.sleep(1.0)
            assert p.poll() is None, "preStop returned before the stopped instance acknowledged the flag"
            os.kill(stub.pid, signal.SIGCONT)
            out, err = p.communicate(timeout=30)
        finally:
            p.kill()
        assert p.returncode == 0, err
        assert os.listdir(f"{flag}.seen") == [n for n in os.listdir(f"{flag}.instances") if n.startswith(f"{stub.pid}-")]
    finally:
        os.kill(stub.pid, signal.SIGCONT)
        stub.kill()
        stub.wait()


def test_a_restarted_pool_container_starts_with_no_drain_flag_left_on_its_emptydir(repos, tmp_path):
    """The drain's files lie on the /tmp emptyDir, which outlives a container restarted in its pod, after its
    preStop raised the flag (a failed liveness probe runs it too): the container's command clears them before
    tritonserver starts, else every model of the new container would refuse every request. The rendered
    command runs here in sh, `tritonserver` on PATH a script that says what it was given and what it found."""
    import os

    pod = by_kind(rendered(repos["cpu"], tmp_path / "out"))["Deployment"]["bert-pool-32"]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    flag = tmp_path / "drain"
    for f in (flag, Path(f"{flag}.busy/7"), Path(f"{flag}.seen/7-0"), Path(f"{flag}.instances/7-0")):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tritonserver").write_text(f'#!/bin/sh\nls -a {tmp_path} | grep -c "^drain" || true\necho "$@"\n')
    (bin_dir / "tritonserver").chmod(0o755)
    env = {**os.environ, "EMBTRT_DRAIN_FILE": str(flag), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    run = subprocess.run(c["command"] + c["args"], env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    found, args = run.stdout.splitlines()
    assert found == "0", "drain files left for the new container"
    assert args.split() == c["args"]   # tritonserver given its arguments unchanged

def test_a_dashboard_and_alert_rules_are_rendered_and_with_the_operator_monitors_that_select_the_pods(repos, tmp_path):
    """#72: the Grafana dashboard (a ConfigMap with the sidecar's label) and the alert rules for a CPU embedder;
    a GPU repository adds the GPU memory panel and alert; --alert-p99-ms, else the SLO tune recorded, else 1 s
    is the latency alert's bound; --prometheus-operator adds a PrometheusRule and PodMonitors whose selectors and
    ports are the pool and gateway pods' own. (Their queries run on a real Prometheus: test_observability.py.)"""
    import shutil

    def parts(files):
        board = json.loads(files["dashboard.yaml"][0]["data"]["bert.json"])
        rules = yaml.safe_load(files["alert-rules.yaml"][0]["data"]["embtrt.rules.yml"])["groups"][0]["rules"]
        return [t["expr"] for p in board["panels"] for t in p["targets"]], {r["alert"]: r for r in rules}

    files = rendered(repos["cpu"], tmp_path / "cpu")
    assert files["dashboard.yaml"][0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    exprs, rules = parts(files)
    assert any("embtrt_gateway_request_seconds_bucket" in e for e in exprs) and not any("DCGM" in e for e in exprs)
    assert sorted(rules) == ["EmbtrtLatencyOverSLO", "EmbtrtPoolDown", "EmbtrtRequestsStuck", "EmbtrtServerErrors"]
    assert rules["EmbtrtLatencyOverSLO"]["expr"].endswith("> 1") and rules["EmbtrtLatencyOverSLO"]["labels"]["route"] == "embeddings"
    assert "monitoring.yaml" not in files   # CRDs only when asked for

    exprs, rules = parts(rendered(repos["trt"], tmp_path / "trt", alert_p99_ms=250))
    assert any("DCGM_FI_DEV_FB_USED" in e for e in exprs) and "EmbtrtGPUMemoryNearFull" in rules
    assert rules["EmbtrtLatencyOverSLO"]["expr"].endswith("> 0.25")

    tuned = tmp_path / "tuned"
    shutil.copytree(repos["cpu"], tuned)
    man = json.loads((tuned / "embtrt.json").read_text())
    (tuned / "embtrt.json").write_text(json.dumps({**man, "tuning": {"slo_p99_ms": {"32": 80, "64": 300}}}))
    _, rules = parts(rendered(tuned, tmp_path / "tuned-out"))
    assert rules["EmbtrtLatencyOverSLO"]["expr"].endswith("> 0.3")

    files = rendered(repos["cpu"], tmp_path / "op", prometheus_operator=True)
    assert "monitoring.yaml" in files["kustomization.yaml"][0]["resources"]
    kinds = by_kind(files)
    rule = kinds["PrometheusRule"]["bert-alerts"]
    assert rule["spec"] == yaml.safe_load(files["alert-rules.yaml"][0]["data"]["embtrt.rules.yml"])
    for mon, deploys in (("bert-pools", [d for n, d in kinds["Deployment"].items() if "-pool-" in n]),
                         ("bert-gateway", [kinds["Deployment"]["bert-gateway"]])):
        spec = kinds["PodMonitor"][mon]["spec"]
        for d in deploys:
            pod = d["spec"]["template"]
            assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(), mon
            ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
            assert spec["podMetricsEndpoints"][0]["port"] in ports, (mon, ports)
    pools_selector = kinds["PodMonitor"]["bert-pools"]["spec"]["selector"]["matchLabels"]
    gateway_labels = kinds["Deployment"]["bert-gateway"]["spec"]["template"]["metadata"]["labels"]
    assert not pools_selector.items() <= gateway_labels.items()   # the pools' monitor scrapes the pools only


def test_an_otlp_endpoint_traces_the_gateway_and_the_pools_and_none_renders_no_tracing(repos, tmp_path, monkeypatch):
    """#72: `embtrt k8s --otlp-endpoint URL --trace-sample F`: the gateway's tracing flags, the pools' tritonserver in
    its OpenTelemetry mode (embtrt serve's flags for that URL; one in round(1/F) requests) with the endpoint in
    its environment for the front door's spans; without it nothing of tracing is rendered, whatever the rendering
    machine's OTEL_* variables say; a bad URL or rate is refused."""
    from embtrt.serve.otel import ENDPOINT_ENV, trace_config

    url = "http://otel-collector.monitoring:4318/v1/traces"
    cli = [sys.executable, "-m", "embtrt.cli", "k8s", str(repos["cpu"]), "--image", STANDIN, "--server-python", PY]
    p = subprocess.run([*cli, "--out", str(tmp_path / "t"), "--otlp-endpoint", url, "--trace-sample", "0.25"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    kinds = by_kind(load(tmp_path / "t"))
    gw = kinds["Deployment"]["bert-gateway"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert gw[gw.index("--otlp-endpoint") + 1] == url and gw[gw.index("--trace-sample") + 1] == "0.25", gw
    pools = [d for n, d in kinds["Deployment"].items() if "-pool-" in n]
    assert pools
    for d in pools:
        c = d["spec"]["template"]["spec"]["containers"][0]
        assert c["args"][-6:] == list(trace_config(url, 0.25)) and "--trace-config=rate=4" in c["args"], c["args"]
        assert {"name": ENDPOINT_ENV, "value": url} in c["env"], c["env"]

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://this-machine:4318")
    write(K8sSpec(repos["cpu"], tmp_path / "plain", image=STANDIN, server_python=PY), log=lambda _m: None)
    text = "".join(f.read_text() for f in (tmp_path / "plain").glob("*.yaml"))
    assert "otlp" not in text and "trace-config" not in text and "OTEL_" not in text
    for bad, said in ((("--otlp-endpoint", "collector:4318"), "invalid --otlp-endpoint"),
                      (("--trace-sample", "2"), "invalid trace sample")):
        r = subprocess.run([*cli, "--out", str(tmp_path / "bad"), *bad], capture_output=True, text=True)
        assert r.returncode != 0 and said in r.stderr, r.stderr
