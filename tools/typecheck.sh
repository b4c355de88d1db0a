#!/usr/bin/env bash
# Type-check the product code with mypy. The repository maps folders to packages (pyproject's
# [tool.setuptools.package-dir]: coordinator/ is fedort.coordinator, ...), which mypy cannot follow
# from the source tree, so this builds a throwaway tree of symlinks shaped like the installed package
# and checks `fedort` there. Configuration: pyproject's [tool.mypy]. Extra arguments go to mypy.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
case "$python" in /*) ;; */*) python="$PWD/$python" ;; esac   # relative to where this was started
tree="$(mktemp -d "${TMPDIR:-/tmp}/fedort-typecheck.XXXXXX")"
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/fedort"
for entry in "$root"/fedort/*; do
    case "$(basename "$entry")" in __pycache__) continue ;; esac
    ln -s "$entry" "$tree/fedort/$(basename "$entry")"
done
for folder in coordinator edge_client protos simulations; do   # the folders package-dir maps under fedort
    ln -s "$root/$folder" "$tree/fedort/$folder"
done
cd "$tree"
# the cache lives in the repository (ignored by git) so repeated runs are incremental; reported paths are
# turned back into the repository's (fedort/coordinator/x.py -> coordinator/x.py)
set +e
"$python" -m mypy --config-file "$root/pyproject.toml" --cache-dir "$root/.mypy_cache" -p fedort "$@" \
    | sed -E 's#^fedort/(coordinator|edge_client|protos|simulations)/#\1/#'
status=${PIPESTATUS[0]}
exit "$status"
