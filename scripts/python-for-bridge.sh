#!/usr/bin/env bash
# Prints the Python the python bridge should be built with (PyO3 links its
# libpython; the bridge tests make their venv with it): PYO3_PYTHON when
# set, else the newest Python 3.12+ with a shared libpython found on PATH
# or under pyenv. Prints nothing when there is none (PyO3 then uses
# `python3` and the bridge tests say why they skip).
set -euo pipefail
if [[ -n "${PYO3_PYTHON:-}" ]]; then echo "$PYO3_PYTHON"; exit 0; fi
ok() {
    "$1" -c 'import sys, sysconfig; sys.exit(0 if sys.version_info >= (3, 12) and sysconfig.get_config_var("Py_ENABLE_SHARED") else 1)' 2>/dev/null
}
candidates=()
for v in 3.12 3.13 3.14; do
    command -v "python$v" >/dev/null 2>&1 && candidates+=("$(command -v "python$v")")
    root="$(pyenv root 2>/dev/null || true)"
    if [[ -n "$root" ]]; then
        for p in "$root"/versions/"$v"*/bin/python"$v"; do [[ -x "$p" ]] && candidates+=("$p"); done
    fi
done
for p in "${candidates[@]}"; do
    # pyenv shims answer for versions that are not installed: check each.
    if ok "$p"; then "$p" -c 'import sys; print(sys.executable)'; exit 0; fi
done
