"""The built book served on loopback, and headless Debian Chromium driven by Playwright."""
from pathlib import Path

import pytest
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, serve
from tests.support.processes import descendants, wait_until_gone

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
VIEWPORT = {"width": 1280, "height": 800}  # a common laptop screen


def pytest_generate_tests(metafunc):
    """One test per HTML page of the book (index.html alone when there is no build, to say so);
    not Sphinx's own folders (_static, _sources) nor hidden ones a stale build may have left."""
    if "page_path" in metafunc.fixturenames:
        pages = sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
                       if not p.relative_to(HTML).parts[0].startswith(("_", ".")))
        metafunc.parametrize("page_path", pages or ["index.html"])


@pytest.fixture(scope="session")
def book_dir() -> Path:
    return HTML


@pytest.fixture(scope="session")
def book_url():
    """Base URL of _build/html served by a thread on 127.0.0.1 and a free port."""
    if not (HTML / "index.html").is_file():
        pytest.fail(f"no built book in {HTML.relative_to(ROOT)}: run `make book` (or `make test-book`) "
                    "first", pytrace=False)
    with serve(HTML) as url:
        yield url


@pytest.fixture(scope="session")
def browser_context():
    """One Chromium for all pages; fails its teardown if a browser process outlives it."""
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} not found: run `make test-browser`, which installs Debian's chromium",
                    pytrace=False)
    from playwright.sync_api import sync_playwright

    before = descendants()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        context = browser.new_context(viewport=VIEWPORT, service_workers="block")
        yield context
        context.close()
        browser.close()
    alive = wait_until_gone(descendants() - before, timeout=10)
    assert not alive, f"browser processes left running: {sorted(alive)}"
