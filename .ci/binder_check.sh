#!/usr/bin/env bash
# Emulates a Binder launch: a fresh venv from binder/requirements.txt (pip run from
# the repository root, as Binder does), binder/postBuild, then every kernel started
# through binder/start, which alone must give it 8 simulated CPU devices.
#
# Usage: .ci/binder_check.sh [install] [run]   (both when neither is named)
#   install: the fresh venv (CI installs it in the background while the tests run)
#   run: postBuild, its settings, and every notebook through binder/start, in that venv
set -euo pipefail
steps="${*:-install run}"
for step in $steps; do
  [[ "$step" == install || "$step" == run ]] || { echo "unknown step $step: install or run"; exit 2; }
done
cd "$(dirname "$0")/.."
venv="${BINDER_VENV:-.venv-binder}"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Only binder/start may set these: the check fails if it stops doing so.
unset XLA_FLAGS JAX_PLATFORMS

want="$(sed -n 's/^python-\([0-9]*\.[0-9]*\).*/\1/p' binder/runtime.txt)"
have="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ "$want" != "$have" ]]; then
  echo "binder/runtime.txt asks for Python $want but $python is $have; set PYTHON=python$want."
  exit 1
fi

if [[ " $steps " == *" install "* ]]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -r binder/requirements.txt
  echo "installed $venv from binder/requirements.txt on Python $have"
fi
[[ " $steps " == *" run "* ]] || exit 0
[[ -x "$venv/bin/jupyter" ]] || { echo "no $venv: run $0 install first"; exit 1; }

PATH="$PWD/$venv/bin:$PATH" HOME="$work" bash binder/postBuild
"$venv/bin/python" - <<'PY'
import json, sys
from pathlib import Path

prefix = Path(sys.prefix) / "share" / "jupyter" / "lab"
overrides = json.loads((prefix / "settings" / "overrides.json").read_text())
for plugin, values in overrides.items():
    package, name = plugin.split(":")
    schema = json.loads((prefix / "schemas" / package / f"{name}.json").read_text())
    unknown = sorted(set(values) - set(schema["properties"]))
    assert not unknown, f"{plugin} has no settings {unknown}"
print("postBuild settings match JupyterLab's schemas:", ", ".join(overrides))
PY

# A kernel started through binder/start, with no set-up call, sees 8 CPU devices.
cat > "$work/probe.ipynb" <<'JSON'
{"cells": [{"cell_type": "code", "execution_count": null, "id": "probe", "metadata": {},
  "outputs": [], "source": ["import sys, jax\n",
  "assert (jax.default_backend(), jax.device_count()) == ('cpu', 8), jax.devices()\n",
  "print(sys.executable, jax.device_count())"]}],
 "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
 "nbformat": 4, "nbformat_minor": 5}
JSON
binder/start timeout 300 "$venv/bin/jupyter" nbconvert --to notebook --execute \
  --output-dir "$work/out" "$work/probe.ipynb" --log-level=WARN
grep -q "$venv/bin/python" "$work/out/probe.ipynb" || {
  echo "the kernel did not run in $venv"; exit 1; }
echo "a kernel started through binder/start sees 8 CPU devices"

# Every notebook, two at a time (most of a notebook's time is its kernel and JAX
# starting, which leaves the other core idle), each through binder/start.
run_one() {
  local start=$SECONDS
  binder/start timeout 300 "$venv/bin/jupyter" nbconvert --to notebook --execute \
    --output-dir "$work/out" "$1" --log-level=WARN || { echo "FAILED: $1 through binder/start"; return 1; }
  echo "ran $1 through binder/start in $((SECONDS - start))s"
}
export -f run_one
export venv work
shopt -s nullglob
notebooks=(tutorials/*.ipynb)
printf '%s\0' "${notebooks[@]}" | xargs -0 -n 1 -P 2 bash -c 'run_one "$0"'
echo "binder check passed: ${#notebooks[@]} notebooks"
