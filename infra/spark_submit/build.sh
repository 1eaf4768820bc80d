#!/usr/bin/env bash
# Builds privlake's wheel and the zip that spark-submit ships to the driver and executors
# (--py-files takes .zip, .egg and .py files, not .whl: the zip is the same wheel, renamed).
#
#   infra/spark_submit/build.sh [OUT_DIR]    # default OUT_DIR: dist/ under the project
#
# Prints the zip's path last. Builds from a copy of the sources (no build/ or egg-info left in the
# tree) with the Python in $PYTHON (default: the project's .venv/bin/python), which needs setuptools
# and wheel (both in the project's environment): no download.
set -euo pipefail

infra_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
project_dir=$(dirname "$infra_dir")
python=${PYTHON:-$project_dir/.venv/bin/python}
out_dir=${1:-$project_dir/dist}

[[ -x $python ]] || { echo "build.sh: no Python at $python (run 'make install' or set PYTHON)" >&2; exit 1; }
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/privlake-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

tar -C "$project_dir" --exclude=__pycache__ --exclude='*.pyc' -cf - \
    pyproject.toml README.md schemas transforms pipelines | tar -C "$work" -xf -
"$python" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$work/wheel" "$work" >&2
wheel=$(ls "$work"/wheel/privlake-*.whl)
cp "$wheel" "$out_dir/"
cp "$wheel" "$out_dir/privlake.zip"
echo "$out_dir/$(basename "$wheel")"
echo "$out_dir/privlake.zip"
