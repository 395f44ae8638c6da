"""The GPU kit's view of the host's packages for the Python-backend stub: everything but numpy
(where the kit's 1.26 replaces it) and what is built for numpy 2 that transformers imports when
present (the H200 host's scikit-learn and SciPy made every model load fail: 2026-12-04)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _kit():
    spec = importlib.util.spec_from_file_location("gpukit_kit", ROOT / "benchmarks/gpukit/kit.py")
    mod = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path[:] = path   # kit.py puts benchmarks/gpukit (models.py, report.py, ...) first on the path
    return mod


def test_the_stub_sees_the_hosts_packages_less_numpy_and_what_is_built_for_numpy_2(tmp_path):
    kit = _kit()
    host = tmp_path / "site-packages"
    entries = ["numpy", "numpy-2.5.2.dist-info", "numpy.libs", "scipy", "scipy-1.17.0.dist-info", "scipy.libs",
               "sklearn", "scikit_learn-1.8.0.dist-info", "scikit_learn.libs", "torch", "torch-2.11.0.dist-info",
               "transformers", "numpyro", "scipy_extra", "distutils-precedence.pth", "six.py"]
    for name in entries:
        (host / name).mkdir(parents=True) if "." not in name or name.endswith((".dist-info", ".libs")) \
            else (host / name).write_text("")
    view = kit.host_view(host, tmp_path / "view", ("numpy", *kit.STUB_HIDDEN))
    kept = sorted(p.name for p in view.iterdir())
    assert kept == sorted(["torch", "torch-2.11.0.dist-info", "transformers", "numpyro", "scipy_extra",
                           "distutils-precedence.pth", "six.py"])
    assert all((view / name).is_symlink() and (view / name).resolve() == (host / name).resolve() for name in kept)
    # the dry run (numpy below 2, not replaced) keeps numpy and hides only the numpy-2 builds
    kept_dry = {p.name for p in kit.host_view(host, tmp_path / "dry", kit.STUB_HIDDEN).iterdir()}
    assert {"numpy", "numpy-2.5.2.dist-info"} <= kept_dry and not kept_dry & {"scipy", "sklearn", "scikit_learn.libs"}


def test_the_setup_check_imports_what_the_backend_imports():
    kit = _kit()
    backend = (ROOT / "python_backend/embtrt_backend/torch_encoder.py").read_text()
    for auto_class in ("AutoModel", "AutoModelForSequenceClassification", "AutoModelForMaskedLM"):
        assert f'"{auto_class}"' in backend and auto_class in kit.STUB_CHECK
