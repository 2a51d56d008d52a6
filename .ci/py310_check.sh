#!/usr/bin/env bash
# Python 3.10, the floor `requires-python` advertises: this project's wheel installed on 3.10
# without torch or FlashInfer, then `doctor`, `pins check` on the docs' pin tables, `hook status`
# and `import fi_patches.auto` + `status()` there, each with the exit code the docs give.
#
# Usage: .ci/py310_check.sh VENV [PYTHON3.10]
#   VENV absent: made with PYTHON3.10 (default: pyenv's 3.10), and the wheel installed with its
#   base dependencies (packaging, wrapt, and tomli on 3.10) from the registry, as a user would.
#   VENV present: reused offline; the wheel is rebuilt and reinstalled without its dependencies.
# The wheel is built offline by BUILD_PYTHON (default .venv/bin/python, which has setuptools).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${1:?usage: .ci/py310_check.sh VENV [PYTHON3.10]}
case $venv in /*) ;; *) venv=$root/$venv ;; esac
py310=${2:-}
build_python=${BUILD_PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "py310_check: $*" >&2; exit 1; }

"$build_python" -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$work/wheels" .
wheel=$(ls "$work"/wheels/fi_patches-*.whl)
if [ -x "$venv/bin/python" ]; then
    "$venv/bin/python" -m pip install -q --no-deps --no-index --force-reinstall "$wheel"
else
    if [ -z "$py310" ]; then  # pyenv's 3.10 (grep reads all of the list: no SIGPIPE under pipefail)
        versions=$(pyenv versions --bare 2>/dev/null | grep '^3\.10\.' || true)
        py310=$(pyenv root 2>/dev/null)/versions/${versions%%$'\n'*}/bin/python
    fi
    [ -x "$py310" ] || fail "no Python 3.10 interpreter (looked for $py310)"
    "$py310" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "$wheel"
fi
python=$venv/bin/python

# The docs' pin tables: every ```toml block with a [meta] table in docs/*.md.
awk -v dir="$work" '/^```toml$/{n++; f=1; next} /^```$/{f=0} f{print > (dir "/doc" n ".toml")}' docs/*.md
tables=$(grep -l '^\[meta\]' "$work"/doc*.toml || true)
[ -n "$tables" ] || fail "docs/*.md hold no \`\`\`toml block with a [meta] table"

cd "$work"  # outside the checkout, so the installed wheel is what runs
"$python" -c '
import sys
import fi_patches
assert sys.version_info[:2] == (3, 10), sys.version
assert "site-packages" in fi_patches.__file__, fi_patches.__file__
for name in ("torch", "flashinfer"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise AssertionError(f"{name} is importable here; this check is for a host without it")
'

run() {  # run EXPECTED_RC CMD...: the command must exit EXPECTED_RC
    local expected=$1 rc=0
    shift
    "$@" > "$work/out" 2>&1 || rc=$?
    if [ "$rc" != "$expected" ]; then
        cat "$work/out" >&2
        fail "\`${*#"$python" }\` exited $rc, expected $expected"
    fi
    if grep -q 'Traceback' "$work/out"; then
        cat "$work/out" >&2
        fail "\`${*#"$python" }\` printed a traceback"
    fi
}

run 0 "$python" -m fi_patches doctor
grep -q 'FlashInfer (flashinfer-python) is not installed' "$work/out" || fail "doctor: $(cat "$work/out")"
# 3: entries unchecked here (no FlashInfer), the meta matching FI_PATCHES_DEVICE = its device.
for table in $tables; do
    device=$(sed -n '/^device = "/{s/^device = "\([^"]*\)".*/\1/p;q}' "$table")
    [ "$device" = "*" ] && device=sm_103
    FI_PATCHES_DEVICE=$device run 3 "$python" -m fi_patches pins check "$table"
    grep -q '^meta: OK' "$work/out" || fail "pins check: $(cat "$work/out")"
done
# 0: the wheel ships the hook.
run 0 "$python" -m fi_patches hook status
FI_PATCHES_AUTO=1 run 0 "$python" -c '
import fi_patches, fi_patches.auto
from fi_patches.startup import pending
assert pending(), "the start-up hook did not load"
assert all(not s.enabled for s in fi_patches.status())
'
echo "py310_check: $(echo "$tables" | wc -w) pin tables of the docs checked"
echo "py310_check: the wheel works on $("$python" -c 'import sys; print(sys.version.split()[0])') ($venv)"
