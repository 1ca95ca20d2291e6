"""Debian's headless Chromium for the browser and hub tests (Playwright's own browser download
needs the internet, so they drive /usr/bin/chromium, which tools/ensure_chromium.sh installs), and
a folder of HTML served over HTTP on 127.0.0.1 only, by a thread."""
import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
# No GPU, no sandbox (we run as root in a container), and nothing Chromium would fetch by itself.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without logging each request to stderr."""

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve `folder` on loopback and a free port; yields the base URL, stops on exit."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
