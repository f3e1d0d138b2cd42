#!/usr/bin/env bash
# Sets up everything torchtpu needs on a fresh Debian machine with Python 3:
# Debian packages (compiler, Python headers), Python packages (PyTorch 2.13.0
# CPU build, NumPy, the OpenBLAS wheel, pytest), then builds the C core.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
if ! "$PY" - <<'PYEOF'
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
PYEOF
then
  need+=(python3-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q "${need[@]}"
fi

# exactly 2.13.0: a looser requirement would pull a multi-GB CUDA build
"$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore "torch==2.13.0" numpy scipy-openblas32 \
  pytest pytest-timeout expecttest "setuptools>=64" wheel transformers
TORCHTPU_WERROR=1 "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
  --no-build-isolation --no-deps -e .
"$PY" -c "import torchtpu, torch; print('torchtpu ready:', torch.tpu.get_device_name())"
