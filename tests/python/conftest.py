import os
import subprocess
import sys

import pytest
import torch

import torchtpu  # noqa: F401  (registers the tpu device)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _fresh_state():
    """Each test starts with matmul precision at PyTorch's default and the
    CPU fallback enabled, and leaves no queued work or pending error."""
    prev = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(prev)
    torch.tpu.synchronize()


def run_python(code, env=None, timeout=120):
    """Runs code in a fresh interpreter (for settings read at import)."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=e, timeout=timeout, cwd=REPO)
