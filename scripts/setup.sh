#!/usr/bin/env bash
# Sets up .venv at the repository root. Idempotent: a second run only checks.
#
#   ./scripts/setup.sh         the library, its command line (the `cli` extra: tqdm,
#                              filelock) and their run-time dependencies: enough for
#                              `python -m pyg_progcl`
#   ./scripts/setup.sh --dev   also the development tools (the `dev` extra: pytest, ruff,
#                              Sphinx, import-linter, ogb, matplotlib); wheels only, a few
#                              minutes
#   ./scripts/setup.sh --dev --with-sparse
#                              also the optional torch_scatter and torch-sparse, built from
#                              source (15-35 minutes on 2 cores, once; pip's wheel cache
#                              makes later set-ups fast); the tests that need them skip
#                              without them, saying why
#
# A later run upgrades the same .venv. PYTHON picks the interpreter that creates .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
sparse=0
for arg in "$@"; do
    case "$arg" in
        --dev) dev=1 ;;
        --with-sparse) sparse=1 ;;
        *) echo "setup.sh: unknown option '$arg' (use --dev, --with-sparse or nothing)" >&2; exit 2 ;;
    esac
done
say() { echo "setup.sh: $*" >&2; }

if [ ! -x .venv/bin/python ]; then
    say "creating .venv with ${PYTHON:-python3}"
    "${PYTHON:-python3}" -m venv .venv
fi

# pip says what it collects, downloads and installs, line by line; the lines about what
# is already installed, and pip's warnings about each configured local index that lacks
# a package, go.
pip_install() {
    .venv/bin/python -m pip install --disable-pip-version-check --progress-bar off \
        -c constraints-dev.txt "$@" 2>&1 \
        | { grep --line-buffered -v -e "^WARNING: Location 'file://" \
            -e "^Requirement already satisfied" || true; }
    return "${PIPESTATUS[0]}"
}

needs="pyg_progcl torch_geometric sklearn networkx tqdm filelock"
[ "$dev" = 1 ] && needs="$needs pytest ruff sphinx importlinter ogb matplotlib"
installed='import importlib.util as u, sys; sys.exit(any(not u.find_spec(m) for m in sys.argv[1:]))'
if ! .venv/bin/python -c "$installed" $needs 2>/dev/null; then
    say "step 1/2: torch 2.13.0 (a download of some 200 MB for the CPU build, more with CUDA; a few minutes)"
    pip_install torch==2.13.0  # first, so that no dependency pulls another torch build
    if [ "$dev" = 1 ]; then
        say "step 2/2: pyg_progcl and its dependencies with the development tools (torch_geometric, scikit-learn, pytest, ruff, Sphinx, ogb, matplotlib, ...; a few minutes)"
        pip_install -e ".[dev]"
    else
        say "step 2/2: pyg_progcl, its command line and their dependencies (torch_geometric, scikit-learn, networkx, tqdm, filelock; a minute or two)"
        pip_install -e ".[cli]"
    fi
    say "done: .venv is ready"
else
    say ".venv already has everything (${needs// /, }): nothing to install"
fi

# torch_scatter (optional at run time; the tests cover its code path) is source-only on
# PyPI and builds against the installed torch, so without build isolation; its extension
# modules compile side by side, without debug info (which its link strips anyway).
if [ "$sparse" = 1 ] && ! .venv/bin/python -c "import torch_scatter" 2>/dev/null; then
    echo "setup.sh: building torch_scatter from source (a few minutes)..." >&2
    cfg=$(mktemp)
    trap 'rm -f "$cfg"' EXIT
    printf '[build_ext]\nparallel = 4\n' > "$cfg"
    flags="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_config_var("CFLAGS") or "")') -g0"
    DIST_EXTRA_CONFIG="$cfg" CFLAGS="$flags" CXXFLAGS="$flags" \
        pip_install --no-build-isolation "torch_scatter>=2.1" \
        || { echo "setup.sh: torch_scatter did not build (pyg_progcl runs without it: drop --with-sparse)" >&2; exit 1; }
fi

# torch-sparse lets PyG's NeighborLoader sample (the tests run the mini-batch trainer on
# its batches too). Source-only as well; its extensions build with ninja, which MAX_JOBS
# bounds (no parallel build_ext config: two extensions would write one build.ninja).
if [ "$sparse" = 1 ] && ! .venv/bin/python -c "import torch_sparse" 2>/dev/null; then
    echo "setup.sh: building torch-sparse from source (some 10 minutes)..." >&2
    MAX_JOBS="${MAX_JOBS:-2}" pip_install --no-build-isolation "torch-sparse==0.6.18" \
        || { echo "setup.sh: torch-sparse did not build (pyg_progcl runs without it: drop --with-sparse)" >&2; exit 1; }
fi
