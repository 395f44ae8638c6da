"""The `embtrt` command line: help texts, the one error handler, build's cheap checks before the model
is read, and the option parsers."""

import pytest
import typer
from typer.testing import CliRunner

import embtrt.export.spec_options as spec_module
from embtrt_backend.options import OPTION_NAMES
from embtrt.cli import app
from embtrt.cli.measure import parse_bands, parse_options
from embtrt.errors import ModelError, SpecError

runner = CliRunner()
COMMANDS = sorted(typer.main.get_command(app).commands)  # what the app registers, never a list kept by hand


def test_the_app_registers_every_stage_and_the_stress_matrix_is_its_own_command():
    assert {"build", "engines", "check", "serve", "embed", "probe", "demo", "verify", "bench", "matrix", "tune",
            "gateway", "k8s", "up"} <= set(COMMANDS)
    # each kind's own commands, registered from its package by the registry (Kind.cli)
    from embtrt_backend.kinds import KINDS

    assert {"rerank", "classify", "sparse", "encode"} <= set(COMMANDS)
    assert all(k.cli.startswith(f"embtrt.kinds.{k.name}.") for k in KINDS if k.cli)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_renders_without_type_labels_on_flags(command):
    r = runner.invoke(app, [command, "--help"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert "<bool>" not in r.output
    assert "Usage: " in r.output


def test_help_shows_install_extras_and_brackets_literally():
    for args in ([], ["engines"]):
        r = runner.invoke(app, [*args, "--help"])
        assert r.exit_code == 0, r.output
        assert "embtrt[tensorrt]" in r.output, r.output
    r = runner.invoke(app, ["verify", "--help"])  # rich markup once read [/MODEL] as a closing tag and crashed
    assert r.exit_code == 0 and "HOST:PORT[/MODEL]" in r.output, r.output + repr(r.exception)


def test_version_prints_the_package_version():
    from embtrt import __version__

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"embtrt {__version__}", r.output


def test_bench_no_longer_takes_the_matrix_options():
    r = runner.invoke(app, ["bench", "--help"])
    for gone in ("--matrix", "--preempt-concurrency", "--texts-per-band", "--pools", "--max-batch-tokens"):
        assert gone not in r.output
    r = runner.invoke(app, ["matrix", "--help"])
    for kept in ("--max-batch-tokens", "--server", "--pool-server", "--pools", "--preempt-concurrency",
                 "--preempt-repeats", "--texts-per-band", "--only"):
        assert kept in r.output


@pytest.fixture
def model_never_read(monkeypatch):
    """The loaders spec_from_options calls to read the model folder, replaced by ones that fail with a
    ModelError of their own: a build that reaches them exits 3 with 'model folder was read'."""

    def read(*_a, **_k):
        raise ModelError("model folder was read")

    monkeypatch.setattr(spec_module, "inspect_model", read)
    monkeypatch.setattr(spec_module, "read_st_prompts", read)


def test_build_reads_the_model_only_after_its_options_pass(model_never_read, tmp_path):
    # the control: with valid options the build does reach the (patched) loader
    r = runner.invoke(app, ["build", "--out", str(tmp_path / "new")])
    assert r.exit_code == ModelError.exit_code and "model folder was read" in r.output, r.output


@pytest.mark.parametrize("args,field", [
    (["--buckets", "0,abc"], "buckets"),
    (["--buckets", "128,32"], "buckets"),
    (["--name", "9 bad/name"], "name"),
    (["--target", "vllm"], "target"),
    (["--target", "python-ort", "--precision", "fp16"], "precision"),
    (["--max-batch-size", "0"], "max_batch_size"),
    (["--calibration-file", "/nonexistent/texts.txt"], "calibration_file"),
])
def test_build_refuses_a_bad_option_before_reading_the_model(model_never_read, tmp_path, args, field):
    r = runner.invoke(app, ["build", "--out", str(tmp_path / "new"), *args])
    assert r.exit_code == SpecError.exit_code, r.output + repr(r.exception)
    assert f"error: invalid {field}" in r.output and "hint:" in r.output, r.output
    assert "model folder was read" not in r.output
    assert not (tmp_path / "new").exists()


def test_build_refuses_an_out_that_is_a_file_or_full_before_reading_the_model(model_never_read, tmp_path):
    (tmp_path / "file").write_text("x")
    r = runner.invoke(app, ["build", "--out", str(tmp_path / "file")])
    assert r.exit_code == SpecError.exit_code and "invalid out" in r.output and "is a file" in r.output, r.output
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    r = runner.invoke(app, ["build", "--out", str(tmp_path / "full")])
    assert r.exit_code == SpecError.exit_code and "not empty" in r.output and "--force" in r.output, r.output
    r = runner.invoke(app, ["build", "--out", str(tmp_path / "full"), "--force"])  # --force lets it through
    assert r.exit_code == ModelError.exit_code and "model folder was read" in r.output, r.output


def test_an_error_of_any_command_exits_with_its_code_and_prints_message_and_hint(tmp_path):
    r = runner.invoke(app, ["k8s", str(tmp_path), "--out", str(tmp_path / "k"), "--pools", "a,b"])
    assert r.exit_code == SpecError.exit_code, r.output
    assert "error: invalid pools" in r.output and "hint:" in r.output
    r = runner.invoke(app, ["tune", str(tmp_path), "--slo-p99-ms", "fast"])
    assert r.exit_code == SpecError.exit_code and "invalid --slo-p99-ms" in r.output, r.output


def test_request_options_are_the_names_the_served_models_read():

    assert parse_options(["truncate=END", "dimensions=64"]) == {"truncate": "END", "dimensions": 64}
    with pytest.raises(SpecError) as ei:
        parse_options(["temperature=1"])
    assert all(n in ei.value.hint for n in OPTION_NAMES)
    with pytest.raises(SpecError, match="integer"):
        parse_options(["dimensions=wide"])


def test_matrix_bands_read_bucket_labels():
    assert parse_bands("32,<=2048,mixed") == (32, 2048)
    assert parse_bands(None) is None and parse_bands("mixed") is None
    with pytest.raises(SpecError, match="--only"):
        parse_bands("short")


def test_engines_check_on_a_repository_without_plans_says_there_is_nothing_to_check(tmp_path):
    r = CliRunner().invoke(app, ["engines", str(tmp_path), "--check"])
    assert r.exit_code == 0 and "nothing to check" in r.output and "no TensorRT encoders" in r.output


def test_engines_names_every_missing_piece_and_sees_through_the_tensorrt_stubs(tmp_path, monkeypatch):
    import importlib.util

    import embtrt.common.gpu as gpu

    real = importlib.util.find_spec
    monkeypatch.setattr(gpu, "tensorrt_available", lambda: (False, "only type stubs"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pynvml" else real(name, *a))
    r = CliRunner().invoke(app, ["engines", str(tmp_path)])
    assert r.exit_code == 8
    assert "not installed here: tensorrt, nvidia-ml-py (pynvml)" in r.output and "embtrt[tensorrt]" in r.output


def test_json_logs_make_every_logged_line_one_json_object(minilm_repo, tmp_path):
    """#73 (TEI's --json-output): --json-logs turns each logged line, and an error with its hint, into a
    JSON object; without it the lines are plain."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "embtrt.cli"]
    p = subprocess.run([*cmd, "--json-logs", "check", str(minilm_repo)], capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert p.returncode == 0 and len(lines) > 5, p.stdout + p.stderr
    assert all(d["level"] == "INFO" and d["target"] == "embtrt" and d["timestamp"].endswith("+00:00") for d in lines)
    assert any(d["message"].startswith("[ok] embtrt.json") for d in lines), lines
    (tmp_path / "empty").mkdir()
    bad = subprocess.run([*cmd, "--json-logs", "up", str(tmp_path / "empty")], capture_output=True, text=True, timeout=120)
    (doc,) = [json.loads(x) for x in bad.stderr.splitlines()]
    assert bad.returncode != 0 and doc["level"] == "ERROR" and "neither a repository" in doc["message"] and doc["hint"]
    plain = subprocess.run([*cmd, "check", str(minilm_repo)], capture_output=True, text=True, timeout=120)
    assert plain.stdout.startswith("[ok] "), plain.stdout[:200]


def test_bench_s_scenario_options_each_pick_one_kind_and_two_are_refused():
    """`embtrt bench --OPTION` runs the kind whose Kind.bench_flag it is (#69: through the registry); two such
    options pick two kinds and are refused, naming both, before anything is measured."""
    from embtrt_backend.kinds import KINDS

    assert sorted(k.bench_flag for k in KINDS if k.bench_flag) == ["--classify", "--images", "--pages", "--rerank-documents",
                                                                   "--sparse", "--vlm-images"]
    assert [k.name for k in KINDS if k.bench_cli and not k.bench_flag] == ["embedder"]   # the embedding scenarios
    r = runner.invoke(app, ["bench", "--model", "m", "--sparse", "--classify"])
    assert r.exit_code == SpecError.exit_code and "--sparse and --classify pick two kinds' scenarios" in r.output, r.output
    r = runner.invoke(app, ["bench", "--model", "m", "--rerank-documents", "1", "--floor"])
    assert r.exit_code == SpecError.exit_code and "--processes and --floor apply to embedding scenarios only" in r.output
