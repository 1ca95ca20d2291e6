"""A learner in JupyterLab, driven by Playwright in headless Chromium, for the hub tests: log in,
open Lab 0, run its cells, and read the `ok` lines its checks print."""
import contextlib
import hashlib
import json
import re
import time

import psutil
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.hub import ENGINES, ROOT, STATE, STOP_S, command_lines, load_sample, marked_processes


LAB = "labs/00_meet_your_workers.ipynb"


RUN_S = 240  # the whole notebook, on a busy 2-core box


STEP_MS = 60_000  # one page load, login, spawn or click


DEAD_S = 10  # issue 28: a dead kernel's cluster is gone within 10 s


CELLS = ".jp-NotebookPanel:visible .jp-Notebook .jp-Cell"


def stored_ok_lines(path) -> dict[int, list[str]]:
    """Cell index -> the `ok` lines its stored output (p = 4) printed, as patterns for any p:
    every integer may differ."""
    cells = json.loads(path.read_text())["cells"]
    found = {}
    for i, cell in enumerate(cells):
        text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
        lines = [line for line in text.splitlines() if line.startswith("ok:")]
        if lines:
            found[i] = [re.sub(r"\d+", r"\\d+", re.escape(line)) for line in lines]
    return found


def cell_outputs(page, selector: str = ".jp-OutputArea-output") -> list[str]:
    """Every notebook cell's outputs matching `selector`, as text, in order, from the DOM."""
    return page.locator(CELLS).evaluate_all(
        "(cells, sel) => cells.map(c => Array.from(c.querySelectorAll(sel)).map(o => o.innerText).join('\\n'))",
        selector)


def wait_gone(mark: str, word: str, timeout: float) -> list[str]:
    """Wait (bounded) until no process of the hub whose command line holds `word` is left; return those left."""
    deadline = time.monotonic() + timeout
    while True:
        left = [line for line in command_lines(mark) if word in line]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def menu(page, top: str, command: str) -> None:
    """Click a menu bar entry, then the item that runs `command` (JupyterLab's command id)."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(rf"^{top}$")).click()
    page.locator(f".lm-Menu-item[data-command='{command}']").click()


def the_lab():
    """(path, sha256 of the stored file, its `ok` line patterns by cell, its cells, the set-up cell's index)."""
    lab = ROOT / LAB
    expected = stored_ok_lines(lab)
    assert len(expected) >= 5, f"{LAB} stores too few `ok` lines to check: {expected}"
    cells = json.loads(lab.read_text())["cells"]
    setup_cell = next(i for i, c in enumerate(cells) if "dplab.start_cluster(" in "".join(c["source"]))
    return lab, hashlib.sha256(lab.read_bytes()).hexdigest(), expected, cells, setup_cell


def log_in(page, hub, landing: str, timeout_ms: int = STEP_MS) -> None:
    """Log in on the hub's login page, and wait for the page whose url matches `landing`."""
    page.set_default_timeout(STEP_MS)
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", hub.user)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")
    page.wait_for_url(re.compile(landing), timeout=timeout_ms)


def open_the_lab(page, hub) -> None:
    """Open Lab 0 in the learner's JupyterLab, and wait until every cell is on the page with its
    stored outputs and the kernel is idle. Before that, keys and menus can be lost: once, beside
    a busy grader, Clear Outputs left the stored outputs and Shift+Enter left the set-up cell
    unrun ("[ ]"), with the indicator already idle."""
    page.goto(f"{hub.url}/user/{hub.user}/lab/tree/{LAB}")
    page.wait_for_selector(".jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator[data-status='idle']")
    page.wait_for_function(
        "n => document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell').length === n"
        " && document.querySelector('.jp-NotebookPanel .jp-Notebook .jp-OutputArea-output') !== null",
        arg=len(the_lab()[3]), timeout=STEP_MS, polling=250)


def log_in_and_open_the_lab(page, hub) -> None:
    log_in(page, hub, rf"/user/{hub.user}/lab")  # the spawn went through
    open_the_lab(page, hub)


def clear_outputs(page) -> None:
    """The stored outputs go first, so that every output checked afterwards is this run's."""
    menu(page, "Edit", "editmenu:clear-all")
    try:
        page.wait_for_function(
            "() => document.querySelector('.jp-NotebookPanel .jp-Notebook .jp-OutputArea-output') === null",
            timeout=STEP_MS, polling=250)
    except PlaywrightTimeout:
        pass  # said below, with what is left
    assert not any(cell_outputs(page)), "Clear Outputs of All Cells left outputs"


def wait_for_the_end(page, n_cells: int) -> dict[str, list[str]]:
    """Wait (bounded) until the kernel is idle again and the last cell, cluster.stop(), has its
    output (or a cell failed, and the run stopped there); what the page shows, by kind."""
    page.wait_for_function(
        "n => { const cells = document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell');"
        " const busy = document.querySelector(\".jp-Notebook-ExecutionIndicator[data-status='busy']\");"
        " const failed = document.querySelector(\"[data-mime-type='application/vnd.jupyter.stderr']\");"
        " return cells.length === n && !busy && (failed || cells[n - 1].innerText.includes('<Cluster stopped')); }",
        arg=n_cells, timeout=RUN_S * 1000, polling=1000)
    indicator = page.locator(".jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator")
    assert indicator.get_attribute("data-status") == "idle"
    page.locator(CELLS).last.scroll_into_view_if_needed()
    return {
        "texts": cell_outputs(page),
        # jupyterlab-myst renders the labs' MyST directives (exercises, dropdowns) in JupyterLab.
        "markdown": page.locator(".jp-NotebookPanel:visible .jp-MarkdownCell").all_inner_texts(),
        "stdout": cell_outputs(page, "[data-mime-type='application/vnd.jupyter.stdout']"),
        "stderr": cell_outputs(page, "[data-mime-type='application/vnd.jupyter.stderr']"),
    }


def run_to_setup(page, setup_cell: int) -> None:
    """Clear the outputs, then run the cells one by one (Shift+Enter), as a learner does, up to
    the set-up cell, and wait until it shows a running cluster."""
    clear_outputs(page)
    page.locator(CELLS).first.locator(".jp-InputPrompt").click()
    for _ in range(setup_cell + 1):
        page.keyboard.press("Shift+Enter")
    # A run JupyterLab dropped leaves the prompt "[ ]" (queued: "[*]"): ask again in place, at
    # most twice, 30 s apart.
    prompt = page.locator(CELLS).nth(setup_cell).locator(".jp-InputPrompt")
    for _ in range(2):
        try:
            page.wait_for_function("el => !/\\[\\s*\\]/.test(el.innerText)", arg=prompt.element_handle(),
                                   timeout=STEP_MS // 2, polling=250)
            break
        except PlaywrightTimeout:
            prompt.click()
            page.keyboard.press("Control+Enter")
    page.wait_for_function(
        "i => document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')[i]"
        ".innerText.includes('<Cluster running')", arg=setup_cell, timeout=RUN_S * 1000, polling=500)


def shut_down_kernel_and_server(page, hub) -> None:
    """Kernel > Shut Down Kernel, then Stop My Server on the hub's home page."""
    menu(page, "Kernel", "kernelmenu:shutdown")
    assert not wait_gone(hub.mark, "ipykernel", STEP_MS / 1000), "the kernel outlived Shut Down Kernel"
    page.goto(f"{hub.url}/hub/home")
    page.click("#stop")
    page.wait_for_selector("#stop", state="hidden")


def assert_ok_lines(run: dict[str, list[str]], expected, cells, engines: int) -> list[str]:
    """Every cell shows its output, nothing went to stderr, every stored `ok` line is there, and
    Lab 0 counted `engines` engines; the cells' texts."""
    texts, stdout, stderr = run["texts"], run["stdout"], run["stderr"]
    assert len(texts) == len(cells), f"the DOM shows {len(texts)} cells, the lab has {len(cells)}"
    assert sum(map(bool, stdout)) >= len(expected), "the DOM shows too few printed outputs"
    assert not any(stderr), f"cells wrote to stderr (an error, a warning): {[t for t in stderr if t]}"
    for i, patterns in expected.items():
        for pattern in patterns:
            assert re.search(rf"^{pattern}$", texts[i], re.M), f"cell {i} lacks a line like {pattern!r}: {texts[i]!r}"
    assert re.search(rf"^ok: {engines} engines,", "\n".join(texts), re.M)
    return texts


def assert_the_lab_ran(run: dict[str, list[str]], expected, cells, setup_cell) -> None:
    """assert_ok_lines, and the set-up cell started the engines that the spawner's environment asked for."""
    texts = assert_ok_lines(run, expected, cells, ENGINES)
    setup = re.search(r"<Cluster running: (\d+) MPI engines, backend=(\w+), device=(\w+)>", texts[setup_cell])
    assert setup, f"the set-up cell printed no running cluster: {texts[setup_cell]!r}"
    policy = load_sample()  # what the hub's policy gives the first learner on this node (a CPU: gloo, cpu)
    env = policy.learner_environment("own", policy.count_gpus(), 0, ENGINES)
    assert (int(setup[1]), setup[2], setup[3]) == (ENGINES, env["DPLAB_BACKEND"], env["DPLAB_DEVICE"]), setup[0]


def assert_only_the_hub_is_left(hub) -> None:
    """Stopped from the hub's page, the server is gone with everything under it; the hub and its
    proxy are left, and the fixture stops them."""
    assert not wait_gone(hub.mark, "singleuser", STOP_S), "the single-user server outlived Stop My Server"
    left = [line for line in command_lines(hub.mark) if int(line.split()[0]) not in hub.own]
    assert not left, f"still running after the server stopped: {left}"


@contextlib.contextmanager
def learners_page(hub):
    """A Chromium page, logged in to the hub with Lab 0 open; a screenshot of it if the test fails."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        try:
            log_in_and_open_the_lab(page, hub)
            yield page
        except Exception:
            page.screenshot(path=str(STATE / "failure.png"))  # what the browser showed
            raise
        finally:
            browser.close()


def the_one(mark: str, word: str) -> psutil.Process:
    """The one process of the hub whose command line holds `word`."""
    found = [p for p in marked_processes(mark) if word in " ".join(p.cmdline())]
    assert len(found) == 1, f"{len(found)} processes of the hub run {word}: {command_lines(mark)}"
    return found[0]


def cluster_id_of(mark: str) -> str:
    """The id (IPP_CLUSTER_ID) of the one cluster among the hub's processes."""
    ids = set()
    for proc in marked_processes(mark):
        try:
            ids.add(proc.environ().get("IPP_CLUSTER_ID"))
        except psutil.Error:
            pass
    ids.discard(None)
    assert len(ids) == 1, f"the hub's processes carry {len(ids)} cluster ids: {command_lines(mark)}"
    return ids.pop()
