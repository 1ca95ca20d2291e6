"""Debian's headless Chromium for the browser and hub tests: Playwright's own browser download
needs the internet, so they drive /usr/bin/chromium (tools/ensure_chromium.sh installs it)."""
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
# No GPU, no sandbox (we run as root in a container), and nothing Chromium would fetch by itself.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
