"""The labs' launch buttons (JupyterHub via nbgitpuller, Binder) and download button, and the
exercises' hidden solutions, in a tiny book built (no execution) from the real _config.yml."""
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import nbformat
import pytest
import yaml
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")
LAB = "labs/00_tiny"
HUB, BINDER = "https://hub.example.edu", "https://mybinder.org"
FORK, BRANCH = "https://github.com/an-instructor/dp-course", "spring"


def tiny_book(src: Path) -> None:
    """intro.md with one exercise, and a lab notebook with one exercise, its solution and a stored output."""
    (src / "_toc.yml").write_text(f"format: jb-book\nroot: intro\nchapters:\n  - file: {LAB}\n")
    (src / "intro.md").write_text("# Intro\n\n:::{exercise}\n:label: intro-ex-1\n\nA warm-up.\n:::\n\n"
                                  "The lab's first exercise is {numref}`tiny-ex-1`.\n")
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Lab 0: tiny\n\n## Exercises\n\n:::{exercise}\n:label: tiny-ex-1\n\n"
                                      "What is 6 · 7?\n:::\n\n:::{solution} tiny-ex-1\n:class: dropdown\n\n"
                                      "The answer is forty-two.\n:::"),
        nbformat.v4.new_code_cell("6 * 7", execution_count=1, outputs=[nbformat.v4.new_output(
            "execute_result", {"text/plain": "42"}, execution_count=1)]),
    ]
    (src / "labs").mkdir()
    nbformat.write(nb, src / f"{LAB}.ipynb")


def build(tmp_path: Path, name: str, hub: str, binder: str) -> BeautifulSoup:
    """Build the tiny book strictly with the real config, these URLs and no execution; the lab's page."""
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    cfg["execute"] = {"execute_notebooks": "off"}
    # The config moves to tmp_path: its local extensions and static files stay the book's own.
    sphinx = cfg["sphinx"]
    sphinx["local_extensions"] = {k: str(ROOT / v) for k, v in sphinx["local_extensions"].items()}
    sphinx["config"]["html_static_path"] = [str(ROOT / v) for v in sphinx["config"]["html_static_path"]]
    cfg["launch_buttons"].update(jupyterhub_url=hub, binderhub_url=binder)
    cfg["repository"].update(url=FORK, branch=BRANCH)
    config = tmp_path / f"_config_{name}.yml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out = tmp_path / name
    run = subprocess.run([str(JUPYTER_BOOK), "build", "-W", "-n", "--keep-going", "--config", str(config),
                          "--path-output", str(out), str(tmp_path / "src")],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PATH": f"{JUPYTER_BOOK.parent}{os.pathsep}{os.environ['PATH']}"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return BeautifulSoup((out / "_build/html" / f"{LAB}.html").read_text(), "html.parser")


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("launch")
    (tmp / "src").mkdir()
    tiny_book(tmp / "src")
    return {"set": build(tmp, "set", HUB, BINDER), "unset": build(tmp, "unset", "", "")}


def links(page: BeautifulSoup) -> list[str]:
    return [a["href"] for a in page.find_all("a", href=True)]


def test_hub_button_is_an_nbgitpuller_link_to_the_lab_in_jupyterlab(pages):
    [hub] = [h for h in links(pages["set"]) if h.startswith(HUB)]
    url = urlsplit(hub)
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{HUB}/hub/user-redirect/git-pull"
    query = parse_qs(url.query)
    assert query == {"repo": [FORK], "branch": [BRANCH], "urlpath": [f"lab/tree/dp-course/{LAB}.ipynb"]}


def test_binder_button_opens_the_fork_and_the_lab(pages):
    [binder] = [h for h in links(pages["set"]) if h.startswith(BINDER)]
    assert binder == f"{BINDER}/v2/gh/an-instructor/dp-course/{BRANCH}?urlpath=lab/tree/{LAB}.ipynb"


def test_no_launch_button_without_urls(pages):
    page = pages["unset"]
    assert page.select(".dropdown-launch-buttons") == []
    assert not [h for h in links(page) if "git-pull" in h or "/v2/gh/" in h]
    assert pages["set"].select(".dropdown-launch-buttons"), "the check above looks for the wrong element"


@pytest.mark.parametrize("case", ["set", "unset"])
def test_download_button_offers_the_notebook(pages, case):
    assert any(h.endswith(f"_sources/{LAB}.ipynb") for h in links(pages[case]))


def test_solution_is_a_collapsed_dropdown_numbered_on_its_page(pages):
    page = pages["unset"]
    [solution] = page.select("div.solution")
    assert "dropdown" in solution["class"]            # sphinx-togglebutton collapses .admonition.dropdown
    assert any("togglebutton" in s.get("src", "") for s in page.find_all("script"))
    assert "forty-two" in solution.get_text()
    # the intro's exercise comes first in the book, yet the lab's is its page's Exercise 1
    assert page.select_one("div.exercise .admonition-title").get_text(" ", strip=True) == "Exercise 1"
