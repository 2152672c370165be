#!/usr/bin/env bash
# Sets up .venv at the repository root with the library, its optional extras
# and the development tools. Idempotent: a second run only checks.
# PYG_PROGCL_SCATTER=0 skips the (optional, ~3 min) torch_scatter build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip=(.venv/bin/python -m pip --quiet --disable-pip-version-check)
if ! .venv/bin/python -c "import pyg_progcl, torch_geometric, ogb, pytest" 2>/dev/null; then
    "${pip[@]}" install -c constraints-dev.txt torch==2.13.0
    "${pip[@]}" install -c constraints-dev.txt -e ".[dev]"
fi
if [ "${PYG_PROGCL_SCATTER:-1}" != 0 ] && ! .venv/bin/python -c "import torch_scatter" 2>/dev/null; then
    cfg=$(mktemp)
    printf '[build_ext]\nparallel = 2\n' > "$cfg"
    echo "building torch_scatter from source (optional, about 3 minutes)..." >&2
    DIST_EXTRA_CONFIG="$cfg" "${pip[@]}" install -c constraints-dev.txt --no-build-isolation \
        "torch_scatter>=2.1" || echo "warning: torch_scatter did not build; pyg_progcl runs without it" >&2
    rm -f "$cfg"
fi
