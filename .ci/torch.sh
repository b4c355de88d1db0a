#!/usr/bin/env bash
# CI: the tests that need PyTorch (marked `torch`), in an environment of their own, so that `make test`'s
# environment never pulls torch. torch==2.13.0 is pinned to a CPU build (an unpinned torch pulls CUDA
# libraries of several GB); the `fedort[torch]` extra itself accepts a range for users.
# Usage: .ci/torch.sh [PYTHON]   (Python 3.11: the version the pinned CPU wheel is built for)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3.11}
ENV=${TORCH_ENV:-.venv-torch}
[ -x "$ENV/bin/python" ] || "$PY" -m venv "$ENV"
"$ENV/bin/python" -m pip install --quiet torch==2.13.0
"$ENV/bin/python" -m pip install --quiet -e '.[torch,sim]' "pytest>=8" "pytest-asyncio>=0.23" "pytest-timeout>=2.2" \
  "hypothesis>=6.100"
"$ENV/bin/python" -m pytest -q -p no:cacheprovider -m torch tests/ort/test_torch_artifacts.py
