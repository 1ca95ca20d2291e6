"""A learner's path: log in to JupyterHub in Chromium, open Lab 0 in JupyterLab, run all cells,
and find every check's `ok` line and the engine count that the spawner's environment asked for."""
import hashlib
import json
import re
import time

from playwright.sync_api import sync_playwright

from chromium import CHROMIUM, CHROMIUM_ARGS
from hub_process import ENGINES, ROOT, STATE, STOP_S, command_lines, load_sample

LAB = "labs/00_meet_your_workers.ipynb"
RUN_S = 240  # the whole notebook, on a busy 2-core box
STEP_MS = 60_000  # one page load, login, spawn or click


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
    return page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell").evaluate_all(
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


def test_lab0_runs_in_jupyterlab_through_the_hub_with_the_spawners_engines(hub):
    url, user, password = hub.url, hub.user, hub.password
    lab = ROOT / LAB
    stored = hashlib.sha256(lab.read_bytes()).hexdigest()
    expected = stored_ok_lines(lab)
    assert len(expected) >= 5, f"{LAB} stores too few `ok` lines to check: {expected}"
    cells = json.loads(lab.read_text())["cells"]
    n_cells = len(cells)
    setup_cell = next(i for i, c in enumerate(cells) if "dplab.start_cluster(" in "".join(c["source"]))

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        try:
            page.set_default_timeout(STEP_MS)
            page.goto(f"{url}/hub/login")
            page.fill("#username_input", user)
            page.fill("#password_input", password)
            page.click("#login_submit")
            page.wait_for_url(re.compile(rf"/user/{user}/lab"))  # the spawn went through
            page.goto(f"{url}/user/{user}/lab/tree/{LAB}")
            indicator = page.locator(".jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator")
            page.wait_for_selector(".jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator[data-status='idle']")

            # The stored outputs go first, so that every output checked below is this run's.
            menu(page, "Edit", "editmenu:clear-all")
            assert not any(cell_outputs(page)), "Clear Outputs of All Cells left outputs"
            menu(page, "Run", "runmenu:run-all")
            # Done: the kernel is idle again and the last cell, cluster.stop(), has its output (or a
            # cell failed, and Run All stopped there).
            page.wait_for_function(
                "n => { const cells = document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell');"
                " const busy = document.querySelector(\".jp-Notebook-ExecutionIndicator[data-status='busy']\");"
                " const failed = document.querySelector(\"[data-mime-type='application/vnd.jupyter.stderr']\");"
                " return cells.length === n && !busy && (failed || cells[n - 1].innerText.includes('<Cluster stopped')); }",
                arg=n_cells, timeout=RUN_S * 1000, polling=1000)
            assert indicator.get_attribute("data-status") == "idle"
            page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell").last.scroll_into_view_if_needed()
            page.screenshot(path=str(STATE / "lab0.png"))
            texts = cell_outputs(page)
            # jupyterlab-myst renders the labs' MyST directives (exercises, dropdowns) in JupyterLab.
            markdown = page.locator(".jp-NotebookPanel:visible .jp-MarkdownCell").all_inner_texts()
            stdout = cell_outputs(page, "[data-mime-type='application/vnd.jupyter.stdout']")
            stderr = cell_outputs(page, "[data-mime-type='application/vnd.jupyter.stderr']")

            # Stop the kernel (Kernel > Shut Down Kernel), then the server (the hub's home page).
            menu(page, "Kernel", "kernelmenu:shutdown")
            assert not wait_gone(hub.mark, "ipykernel", STEP_MS / 1000), "the kernel outlived Shut Down Kernel"
            page.goto(f"{url}/hub/home")
            page.click("#stop")
            page.wait_for_selector("#stop", state="hidden")
        except Exception:
            page.screenshot(path=str(STATE / "failure.png"))  # what the browser showed
            raise
        finally:
            browser.close()

    raw = [t for t in markdown if re.search(r"^(:::|```)\{", t, re.M)]
    assert len(markdown) == sum(c["cell_type"] == "markdown" for c in cells), len(markdown)
    assert not raw, f"markdown cells show raw MyST directives (is jupyterlab-myst installed?): {raw}"
    assert len(texts) == n_cells, f"the DOM shows {len(texts)} cells, the lab has {n_cells}"
    assert sum(map(bool, stdout)) >= len(expected), "the DOM shows too few printed outputs"
    assert not any(stderr), f"cells wrote to stderr (an error, a warning): {[t for t in stderr if t]}"
    setup = re.search(r"<Cluster running: (\d+) MPI engines, backend=(\w+), device=(\w+)>", texts[setup_cell])
    assert setup, f"the set-up cell printed no running cluster: {texts[setup_cell]!r}"
    policy = load_sample()  # what the hub's policy gives the first learner on this node (a CPU: gloo, cpu)
    env = policy.learner_environment("own", policy.count_gpus(), 0, ENGINES)
    assert (int(setup[1]), setup[2], setup[3]) == (ENGINES, env["DPLAB_BACKEND"], env["DPLAB_DEVICE"]), setup[0]
    for i, patterns in expected.items():
        for pattern in patterns:
            assert re.search(rf"^{pattern}$", texts[i], re.M), f"cell {i} lacks a line like {pattern!r}: {texts[i]!r}"
    assert re.search(rf"^ok: {ENGINES} engines,", "\n".join(texts), re.M)
    assert hashlib.sha256(lab.read_bytes()).hexdigest() == stored, f"{LAB} changed on disk"
    # Stopped from the hub's page, the server is gone with everything under it; the hub and its
    # proxy are left, and the fixture stops them.
    assert not wait_gone(hub.mark, "singleuser", STOP_S), "the single-user server outlived Stop My Server"
    left = [line for line in command_lines(hub.mark) if int(line.split()[0]) not in hub.own]
    assert not left, f"still running after the server stopped: {left}"
