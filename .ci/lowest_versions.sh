#!/usr/bin/env bash
# Co-installability check: a second environment with the LOWEST versions fedort declares
# (grpcio, grpcio-health-checking, grpcio-reflection, protobuf, numpy, ...), made by uv from the
# registry, runs the wire-facing part of the suite. Usage: .ci/lowest_versions.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
ENV=${LOWEST_ENV:-.venv-lowest}
UV=${UV:-}
if [ -z "$UV" ]; then
  UV=$(command -v uv || true)
  [ -n "$UV" ] || UV=.venv/bin/uv
fi
rm -rf "$ENV"
"$UV" venv --quiet --python "$PY" "$ENV"
# fedort's own requirements at their declared minimums ...
VIRTUAL_ENV="$ENV" "$UV" pip install --quiet --resolution lowest-direct -e .
# ... then the test tools, constrained to leave those minimums as they are
VIRTUAL_ENV="$ENV" "$UV" pip freeze --exclude-editable > "$ENV/minimums.txt"
VIRTUAL_ENV="$ENV" "$UV" pip install --quiet -c "$ENV/minimums.txt" "pytest>=8" "pytest-asyncio>=0.23" \
  "pytest-timeout>=2.2" "scikit-learn>=1.3" "cryptography>=42"
"$ENV/bin/python" - <<'PY'
from importlib.metadata import version
print("lowest-versions env:", ", ".join(f"{p} {version(p)}" for p in
      ("grpcio", "grpcio-health-checking", "grpcio-reflection", "protobuf", "numpy", "onnx", "prometheus-client")))
PY
"$ENV/bin/python" -m pytest -q -p no:randomly -p no:cacheprovider \
  tests/protos/test_protos_current.py::test_the_stubs_need_no_newer_protobuf_than_the_declared_minimum \
  tests/protos/test_codec.py tests/coordinator/engine/test_server.py tests/coordinator/rpc/test_monitoring.py tests/coordinator/state/test_statelock.py \
  tests/coordinator/rpc/test_join_limits.py tests/coordinator/rpc/test_tls.py tests/edge_client/test_device_faults.py
