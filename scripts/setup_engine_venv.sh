#!/usr/bin/env bash
# Creates (or brings up to date) .venv-engines, the virtual environment of the engine tests
# (tests/engines): a current torch, transformers and SGLang's own code, next to the system's
# Python packages but not mixed with them. Idempotent: the hash of the pin files is recorded in
# the environment and nothing is installed while it matches, so a second run takes a moment.
#
#   scripts/setup_engine_venv.sh [--force]    --force: reinstall the pins even if recorded
#
# The environment is made from /usr/bin/python3, the interpreter the moestat._core extension in
# build/python is built for (CMake's Python), so the tests import that build. An existing
# environment from another interpreter, or one that no longer runs, is replaced; one without the
# record (made by hand with the same pins, or left half-installed) is adopted: what differs from
# the pins is installed.
#
# tests/engines/requirements.txt: exact pins installed with their dependencies.
# tests/engines/requirements-no-deps.txt: sglang, installed without its dependencies (its own
# list is the whole server; the tests load only sglang/srt/eplb/expert_distribution.py, see
# tests/engines/sglang_harness.py).
#
# The packages are installed by uv (pinned below, put into the environment by pip): torch brings
# its CUDA libraries, 5.5 GB unpacked, which pip takes four minutes to install even from its
# cache; uv installs them in about 80 s from PyPI and in seconds from its cache (~/.cache/uv).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-engines"
python=/usr/bin/python3
requirements="$root/tests/engines/requirements.txt"
requirements_no_deps="$root/tests/engines/requirements-no-deps.txt"
record="$venv/moestat-requirements.sha256"
uv_version=0.13.9

force=0
for arg in "$@"; do
  case $arg in
    --force) force=1 ;;
    *) echo "usage: $0 [--force]" >&2; exit 2 ;;
  esac
done

# What the environment must match: the pin files, the installer and the interpreter's version.
want="$(cat "$requirements" "$requirements_no_deps" | sha256sum | cut -d' ' -f1) uv-$uv_version $("$python" -c 'import sys; print(sys.version.split()[0])')"

venv_python_ok() {
  [[ -x $venv/bin/python ]] &&
    [[ "$("$venv/bin/python" -c 'import sys; print(sys.version.split()[0], sys.base_prefix)' 2>/dev/null)" == \
       "$("$python" -c 'import sys; print(sys.version.split()[0], sys.base_prefix)')" ]]
}

if [[ -d $venv ]] && ! venv_python_ok; then
  echo "setup_engine_venv: $venv is not a working environment of $python; recreating it"
  rm -rf "$venv"
fi

if [[ $force == 0 && -f $record && "$(cat "$record")" == "$want" ]]; then
  echo "setup_engine_venv: $venv is up to date"
  exit 0
fi

if [[ ! -d $venv ]]; then
  echo "setup_engine_venv: creating $venv from $python"
  "$python" -m venv "$venv"
fi

start=$SECONDS
rm -f "$record"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$uv_version"
echo "setup_engine_venv: installing $(grep -Ehv '^\s*(#|$)' "$requirements" "$requirements_no_deps" | tr '\n' ' ')"
uv=("$venv/bin/uv" pip install --quiet --python "$venv/bin/python")
"${uv[@]}" -r "$requirements"
"${uv[@]}" --no-deps -r "$requirements_no_deps"
echo "$want" >"$record"
echo "setup_engine_venv: done in $((SECONDS - start)) s"
