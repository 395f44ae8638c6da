"""A "GPU host" without PyTorch for the TensorRT tests: a subprocess with the stand-ins for
`tensorrt` and `pynvml` (tests/fakes; their names checked against the real libraries in
test_tensorrt_names.py) first on the path, and `import torch` / `transformers` /
`sentence_transformers` failing, as in Triton's TensorRT images."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKES = ROOT / "tests" / "fakes"

PRELUDE = """
import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "sentence_transformers"):
            raise ImportError(f"{{name}} is not installed on this GPU host (blocked by the test)")
        return None
sys.meta_path.insert(0, _NoTorch())
sys.path[:0] = [{fakes!r}, {nvml!r}]
"""


def run_on_gpu_host(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run `code` (dedented) in that subprocess, in tmp_path, with embtrt's sources on the path."""
    script = tmp_path / "gpu_host.py"
    script.write_text(PRELUDE.format(fakes=str(FAKES), nvml=str(FAKES / "nvml")) + textwrap.dedent(code))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "builder"), str(ROOT / "python_backend")]))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
