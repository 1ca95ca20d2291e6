#!/usr/bin/env bash
# make test-hub's installs, each skipped when already done: requirements-hub.txt (JupyterHub,
# JupyterLab, ...) into the venv, configurable-http-proxy from npm under the venv, and
# Debian's chromium when /usr/bin/chromium is missing (needs root and apt-get).
#   tools/hub/install.sh PYTHON
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${1:?usage: tools/hub/install.sh PYTHON}
venv=$(dirname "$(dirname "$python")")
CHP_VERSION=5.3.0  # configurable-http-proxy, the proxy JupyterHub starts; it needs node >= 20
say() { echo "make test-hub: $*" >&2; }

stamp=$venv/.hub-installed
if [[ ! -e $stamp || requirements-hub.txt -nt $stamp ]]; then
  say "installing requirements-hub.txt (JupyterHub, JupyterLab, jupyterlab-myst, nbgitpuller, batchspawner, the idle culler) into $venv"
  "$python" -m pip install -q --disable-pip-version-check -r requirements-hub.txt
  touch "$stamp"
fi

chp=$venv/share/chp/node_modules/.bin/configurable-http-proxy
if [[ ! -x $chp ]] || [[ $("$chp" --version) != "$CHP_VERSION" ]]; then
  if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    say "JupyterHub's proxy, configurable-http-proxy, comes from npm: install Node.js >= 20 and npm" \
        "(Debian: apt-get install nodejs npm), then run it again"
    exit 2
  fi
  say "installing configurable-http-proxy $CHP_VERSION from npm into $venv/share/chp"
  npm install --silent --no-fund --no-audit --prefix "$venv/share/chp" "configurable-http-proxy@$CHP_VERSION" >/dev/null
fi

tools/ensure_chromium.sh
