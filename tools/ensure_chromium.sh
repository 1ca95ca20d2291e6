#!/usr/bin/env bash
# make test-browser and make test-hub drive Debian's chromium (/usr/bin/chromium) with Playwright;
# install it when missing. Playwright's own browser download needs the internet, so it is never used.
set -euo pipefail
[[ -x /usr/bin/chromium ]] && exit 0
say() { echo "browser tests: $*" >&2; }
if ! command -v apt-get >/dev/null; then
  say "no /usr/bin/chromium and no apt-get here: install Chromium with this system's package" \
      "manager so that it is /usr/bin/chromium (or a link to it), then run it again"
  exit 2
fi
if [[ $(id -u) != 0 ]]; then
  say "no /usr/bin/chromium: install it as root (sudo apt-get install -y chromium), then run it again"
  exit 2
fi
say "installing Debian's chromium with apt-get"
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
  || { say "apt-get install chromium failed: see apt's message above"; exit 2; }
