#!/usr/bin/env bash
# Build a small book of intro + the given pages, strict, into _build/check_NAME.
# Usage: tools/check_pages.sh NAME chapters/foo labs/01_bar ...   (paths without suffix)
# Labs render their stored outputs; chapters' code cells are executed.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1; shift
toc=_build/toc_$name.yml
mkdir -p _build

{ echo "format: jb-book"; echo "root: intro"; echo "chapters:"; for p in "$@"; do echo "  - file: $p"; done; } > "$toc"
.venv/bin/python -m booktools.bookconfig _config.yml "_build/_config_$name.yml"
PATH="$PWD/.venv/bin:$PATH" .venv/bin/jupyter-book build -W -n --keep-going \
  --config "_build/_config_$name.yml" --toc "$toc" --path-output "_build/check_$name" .
