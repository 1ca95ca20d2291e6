"""Every page of the built book, opened in headless Chromium with no network but the book's server.

Each page must: load nothing from anywhere else; show no raw TeX outside code, with every math
element typeset by MathJax; load every image; have internal links whose file and #id exist;
log no console or page error; show code no wider than its box at 1280 px; and show no output
(cell outputs, streams), table (Markdown, list-table, pandas) or text listing (literal blocks,
text-lexer code blocks) that scrolls sideways or spills out of the content column. A
full-page screenshot of each (details opened) goes to _build/screenshots/ for a person to
look at. tests/test_output_width.py keeps the lab outputs and listings within the
characters measured here without a browser.
"""
import functools
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from booktools.pages import BOX_CHARS, BOXED_CHARS, TEXT_LEXERS
from tests.support.browser import serve

WAIT_MS = 15_000  # for a page, MathJax or an image
SHOTS = Path(__file__).resolve().parents[2] / "_build" / "screenshots"
TEX = r"\\\(|\\\)|\\\[|\\\]|\$\$|\\[A-Za-z]+"  # delimiters and commands (\frac) of TeX

# Resolves after `promise`, or with `fallback` after WAIT_MS: no wait in a page is unbounded.
BOUNDED = f"(promise, fallback) => Promise.race([promise, new Promise(r => setTimeout(() => r(fallback), {WAIT_MS}))])"

MATH_JS = f"""async () => {{
  const bounded = {BOUNDED};
  const math = [...document.querySelectorAll('.math')];
  if (!math.length) return {{count: 0}};
  if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return {{count: math.length, loaded: false}};
  const done = await bounded(MathJax.startup.promise.then(() => true), false);
  return {{count: math.length, loaded: true, done,
    raw: math.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.trim().slice(0, 80)),
    errors: [...document.querySelectorAll('mjx-merror')].map(e => e.getAttribute('data-mjx-error') || e.textContent)}};
}}"""

# Text nodes outside code and outside MathJax's output that hold TeX.
RAW_TEX_JS = f"""() => {{
  const skip = 'pre, code, kbd, samp, script, style, textarea, mjx-container, .highlight';
  const tex = new RegExp({TEX!r});
  const found = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node; (node = walker.nextNode());) {{
    const el = node.parentElement;
    const m = el && !el.closest(skip) && node.textContent.match(tex);
    if (m) found.push({{tex: m[0], text: node.textContent.trim().slice(0, 100),
                        section: (el.closest('section[id]') || {{}}).id || ''}});
  }}
  return found;
}}"""

IMAGES_JS = f"""async () => {{
  const bounded = {BOUNDED};
  const images = [...document.images];
  images.forEach(img => img.loading = 'eager');
  await bounded(Promise.all(images.map(img => img.complete ? null : new Promise(r => {{
    img.addEventListener('load', r); img.addEventListener('error', r); }}))), null);
  return images.filter(img => !(img.naturalWidth > 0)).map(img => img.getAttribute('src'));
}}"""

LINKS_JS = """() => [...document.querySelectorAll('a[href]')].map(a => [a.href, a.textContent.trim().slice(0, 60)])"""

# Opens every <details> (hidden inputs, dropdowns), then measures each code box.
CODE_JS = f"""() => {{
  document.querySelectorAll('details').forEach(d => d.open = true);
  const text = {list(TEXT_LEXERS)!r};
  const wide = [];
  for (const pre of document.querySelectorAll('div.highlight pre')) {{
    const box = pre.closest('[class*="highlight-"]');
    const lexer = box ? [...box.classList].find(c => c.startsWith('highlight-')).slice(10) : '';
    if (text.includes(lexer) || pre.closest('.cell_output, .output')) continue;
    if (pre.scrollWidth > pre.clientWidth) {{
      const lines = pre.textContent.split('\\n');
      const longest = lines.reduce((a, b) => b.length > a.length ? b : a, '');
      wide.push({{scroll: pre.scrollWidth, client: pre.clientWidth, columns: longest.length,
                  line: longest.trim().slice(0, 70), section: (pre.closest('section[id]') || {{}}).id || ''}});
    }}
  }}
  return wide;
}}"""


# Opens every <details>, then finds each output, table and text listing that scrolls sideways
# (its own box or the nearest box around it that scrolls or clips) or, with no such box, ends
# right of the content column. Code boxes are CODE_JS's.
WIDE_JS = f"""() => {{
  document.querySelectorAll('details').forEach(d => d.open = true);
  const text = {list(TEXT_LEXERS)!r};
  const column = document.querySelector('article') || document.body;
  const right = column.getBoundingClientRect().right;
  const wide = el => {{
    for (let e = el; e && e !== column; e = e.parentElement) {{
      if (['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(e).overflowX))
        return e.scrollWidth > e.clientWidth ? e : null;
    }}
    return el.getBoundingClientRect().right > right + 1 ? el : null;
  }};
  const longest = t => t.split('\\n').reduce((a, b) => b.length > a.length ? b : a, '');
  const found = [], seen = new Set();
  const report = (kind, el, line) => {{
    const box = wide(el);
    if (!box || seen.has(box)) return;
    seen.add(box);
    found.push({{kind, scroll: box.scrollWidth, client: box.clientWidth, line: line.trim().slice(0, 70),
                section: (el.closest('section[id]') || {{}}).id || ''}});
  }};
  for (const table of document.querySelectorAll('table')) {{
    const caption = table.querySelector('caption');
    const first = table.querySelector('tr');
    report('table', table, caption ? caption.textContent : first ? first.innerText.replace(/\\s+/g, ' ') : '');
  }}
  for (const pre of document.querySelectorAll('pre')) {{
    const box = pre.closest('[class*="highlight-"]');
    const lexer = box ? [...box.classList].find(c => c.startsWith('highlight-')).slice(10) : '';
    const output = pre.closest('.cell_output, .output');
    if (!output && box && !text.includes(lexer)) continue;  // code: CODE_JS
    report(output ? 'output' : 'listing', pre, longest(pre.textContent));
  }}
  for (const out of document.querySelectorAll('.cell_output > .output, div.output')) {{
    report('output', out, longest(out.innerText));
  }}
  return found;
}}"""

# How many monospace characters fit in an output box at the top level of the content column,
# and in a text listing inside each kind of box (tip, exercise, dropdown): a box like the
# book's own, added to the page, filled with one more character at a time.
FIT_JS = """() => {
  document.querySelectorAll('details').forEach(d => d.open = true);
  const hosts = {output: document.querySelector('article section'),
                 tip: document.querySelector('.admonition.tip'),
                 exercise: document.querySelector('div.exercise'),
                 dropdown: document.querySelector('.admonition.dropdown')};
  const fits = {};
  for (const [name, host] of Object.entries(hosts)) {
    if (!host) continue;
    const box = document.createElement('div');
    box.className = name === 'output' ? 'cell_output docutils container' : 'highlight-text notranslate';
    box.innerHTML = name === 'output' ? '<div class="output stream highlight-myst-ansi notranslate">' +
      '<div class="highlight"><pre></pre></div></div>' : '<div class="highlight"><pre></pre></div>';
    host.appendChild(box);
    const pre = box.querySelector('pre');
    let n = 1;
    for (; n < 400 && pre.clientWidth; n++) {
      pre.textContent = 'x'.repeat(n);
      if (pre.scrollWidth > pre.clientWidth) break;
    }
    fits[name] = n - 1;
    box.remove();
  }
  return fits;
}"""

@functools.cache
def ids_in(path: Path) -> frozenset[str]:
    """The id= and name= values of an HTML file, where #fragments may point."""
    return frozenset(re.findall(r'\s(?:id|name)="([^"]+)"', path.read_text(errors="replace")))


def broken_link(url: str, base: str, html: Path) -> str | None:
    """Why an internal link does not resolve (its file or its #id is missing), else None."""
    parts = urlsplit(url)
    if not url.startswith(base) or parts.query:
        return None  # another site, or a search query
    target = html / unquote(parts.path[len(urlsplit(base).path):])
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return f"no file {target.relative_to(html)}"
    fragment = unquote(parts.fragment)
    if fragment and target.suffix == ".html" and fragment not in ids_in(target):
        return f"no id {fragment!r} in {target.relative_to(html)}"
    return None


def redirect_target(path: Path) -> str | None:
    """Where a page that only redirects (Jupyter Book's index.html) sends the reader."""
    m = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', path.read_text(), re.I)
    return m.group(1) if m else None


def page_problems(context, base: str, html: Path, page_path: str, shots: Path | None) -> list[str]:
    """Everything wrong with one page of the site at `base` (files in `html`), opened in `context`."""
    problems = []
    page = context.new_page()

    def route(r):
        if r.request.url.startswith(base):
            r.continue_()
        else:
            problems.append(f"request to {r.request.url} (blocked: only the book's server is allowed)")
            r.abort()

    page.route("**/*", route)
    page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status} for {r.url}"))
    try:
        target = redirect_target(html / page_path)
        if target:  # check that it lands, and check the target as a page of its own
            page.goto(base + page_path, wait_until="commit", timeout=WAIT_MS)
            page.wait_for_url(base + target, timeout=WAIT_MS)
            return problems
        page.goto(base + page_path, wait_until="load", timeout=WAIT_MS)

        math = page.evaluate(MATH_JS)
        if math["count"] and not math["loaded"]:
            problems.append(f"{math['count']} math elements but MathJax did not load")
        elif math["count"]:
            if not math["done"]:
                problems.append(f"MathJax did not finish typesetting within {WAIT_MS} ms")
            problems += [f"math not typeset by MathJax: {tex!r}" for tex in math["raw"]]
            problems += [f"TeX error from MathJax: {e}" for e in math["errors"]]
        problems += [f"raw TeX {t['tex']!r} in text {t['text']!r} (section #{t['section']})"
                     for t in page.evaluate(RAW_TEX_JS)]
        problems += [f"image did not load: {src}" for src in page.evaluate(IMAGES_JS)]
        problems += [f"a lab's solution marker shown: {line.strip()!r}" for line in
                     page.inner_text("body").splitlines() if "### BEGIN SOLUTION" in line
                     or "### END SOLUTION" in line or line.lstrip().startswith("# HINT:")]  # for make student only (_ext/solution_markers.py)
        for url, text in page.evaluate(LINKS_JS):
            why = broken_link(url, base, html)
            if why:
                problems.append(f"link {text!r} -> {url[len(base):]}: {why}")
        problems += [f"code wider than its box ({w['scroll']} > {w['client']} px, {w['columns']} "
                     f"columns) in section #{w['section']}: {w['line']!r}" for w in page.evaluate(CODE_JS)]
        problems += [f"{w['kind']} wider than its box ({w['scroll']} > {w['client']} px) in section "
                     f"#{w['section']}: {w['line']!r}" for w in page.evaluate(WIDE_JS)]
        if shots:
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=shots / (page_path.replace("/", "__").removesuffix(".html") + ".png"),
                            full_page=True, timeout=WAIT_MS)
    finally:
        page.close()
    return problems


def test_page(page_path, book_url, book_dir, browser_context):
    problems = page_problems(browser_context, book_url, book_dir, page_path, SHOTS)
    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)


BROKEN_PAGE = """<!DOCTYPE html><html><head>
<script>window.MathJax = {options: {processHtmlClass: "math", ignoreHtmlClass: "body"}};</script>
<script defer src="_static/mathjax/tex-chtml.js"></script>
<script src="https://cdn.example.org/lib.js"></script></head>
<body class="body"><section id="s"><p>Raw \\(x^2\\)</p><p>$$y$$</p><p>\\frac12</p>
<p><span class="math">\\(a + b\\)</span> <span class="math">\\(x^2^3\\)</span></p>
<img src="missing.png"><a href="other.html#nowhere">a</a> <a href="gone.html">b</a>
<div class="highlight-python"><div class="highlight"><pre style="overflow:auto">__CODE__
### BEGIN SOLUTION: hint</pre></div></div>
<div class="cell_output"><div class="output stream highlight-myst-ansi"><div class="highlight">
<pre style="overflow:auto">ok
printed __WIDE__</pre></div></div></div>
<div style="overflow:auto"><table><caption>bytes per rank</caption><tr><td>__WIDE__</td></tr></table></div>
<div class="cell_output"><div class="output text_html"><table class="dataframe"><tr><th>frame</th>
<td>__WIDE__</td></tr></table></div></div>
<div class="highlight-text"><div class="highlight"><pre style="overflow:auto">listed __WIDE__</pre></div></div>
<pre class="literal-block" style="overflow:hidden">literal __WIDE__</pre>
<div class="highlight-text"><div class="highlight"><pre style="overflow:auto">narrow</pre></div></div>
<script>console.error("boom"); undefinedFunction();</script></section></body></html>"""


def test_checks_catch_what_they_look_for(tmp_path, book_dir, browser_context):
    (tmp_path / "_static").symlink_to(book_dir / "_static")
    bad = BROKEN_PAGE.replace("__CODE__", "x" * 200).replace("__WIDE__", "w" * 200)
    (tmp_path / "bad.html").write_text(bad)
    (tmp_path / "other.html").write_text('<html><body id="here">ok</body></html>')
    with serve(tmp_path) as base:
        problems = page_problems(browser_context, base, tmp_path, "bad.html", None)
    text = "\n".join(problems)
    for expected in ["request to https://cdn.example.org/lib.js", "raw TeX '\\\\('", "raw TeX '$$'",
                     "raw TeX '\\\\frac'", "TeX error from MathJax", "image did not load: missing.png",
                     "no id 'nowhere' in other.html", "no file gone.html", "HTTP 404",
                     "console error: boom", "page error: undefinedFunction is not defined",
                     "code wider than its box", "a lab's solution marker shown",
                     "output wider than its box", "table wider than its box",
                     "section #s: 'bytes per rank'", "section #s: 'frame www", "listing wider than its box",
                     "section #s: 'listed www", "section #s: 'literal www"]:
        assert expected in text, f"{expected!r} not reported in:\n{text}"
    assert "math not typeset" not in text, text  # a + b was typeset
    assert "'narrow'" not in text and "'ok'" not in text, text  # the longest line is named
    assert text.count("wider than its box") == 6, text  # each box once


# A page with every kind of box FIT_JS measures in (tip, exercise, dropdown).
FIT_PAGE = "chapters/launching.html"


def test_boxes_hold_the_characters_the_source_check_allows(book_url, browser_context):
    """tests/test_output_width.py judges outputs and listings by BOX_CHARS and BOXED_CHARS:
    the built book's boxes must hold that many characters."""
    page = browser_context.new_page()
    try:
        page.goto(book_url + FIT_PAGE, wait_until="load", timeout=WAIT_MS)
        fits = page.evaluate(FIT_JS)
    finally:
        page.close()
    assert set(fits) == {"output", "tip", "exercise", "dropdown"}, f"{FIT_PAGE} lacks a box: {fits}"
    assert fits["output"] >= BOX_CHARS, f"an output box holds {fits['output']} characters, " \
        f"fewer than BOX_CHARS = {BOX_CHARS} in booktools/pages.py"
    boxed = min(v for k, v in fits.items() if k != "output")
    assert boxed >= BOXED_CHARS, f"a listing in a box holds {boxed} characters ({fits}), fewer " \
        f"than BOXED_CHARS = {BOXED_CHARS} in booktools/pages.py"
