"""Check the built site the way a reader sees it: nothing cut off at 1280 px.

Opens every page of the built site (``site/``, from ``make docs``) in headless Chromium at 1280 x 900 and reports
each code block (``pre``, ``code``) and table that is wider than its container (``scrollWidth > clientWidth``:
the reader would have to scroll it sideways), page by page. Exits 1 when any is found, 2 when no browser can be
started (with the commands that install one), 0 otherwise. Screenshots of a few pages go to ``--shots``.

    python docs/check_layout.py                    # site/ -> report; screenshots in site-shots/
    python docs/check_layout.py --site site --shots /tmp/shots --page getting-started.html

Needs playwright (``pip install -e ".[docs-check]"`` or ``pip install playwright``) and a Chromium; playwright's
own browser download is not needed: the system's ``chromium-headless-shell`` (``apt-get install
chromium-headless-shell``) or ``chromium`` is used, or the one named by ``$CHROMIUM``. ``make docs-check`` builds
the site and runs this script.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import sys
import threading
from pathlib import Path

WIDTH, HEIGHT = 1280, 900
# Pages screenshotted by default: the first pages a reader opens, a notebook, a results page with wide tables.
DEFAULT_SHOTS = ("index.html", "getting-started.html", "notebooks/01_quickstart.html", "benchmarks/demo.html")
CANDIDATES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = (
    "Install a browser and playwright, then run again:\n"
    "  apt-get install chromium-headless-shell      # (Debian/Ubuntu; or chromium)\n"
    '  pip install playwright                       # or: pip install -e ".[docs-check]"\n'
    "or point $CHROMIUM at a Chromium or Chrome executable."
)

# Code blocks and tables wider than their box (each reported once, with the heading it sits under).
MEASURE_JS = r"""
() => {
  const out = [];
  const seen = new Set();
  const describe = (el) => {
    const text = (el.innerText || "").trim().split("\n")[0].slice(0, 70);
    let where = "";
    for (let p = el; p; p = p.previousElementSibling || p.parentElement) {
      if (/^H[1-6]$/.test(p.tagName)) { where = p.innerText.replace("¶", "").trim().slice(0, 50); break; }
    }
    return {text, where};
  };
  const content = document.querySelector(".md-content") || document.body;
  // Material scrolls the <code> inside a <pre> (and a notebook cell's <pre>): measure both, report the block once.
  for (const pre of content.querySelectorAll("pre")) {
    if (seen.has(pre) || !pre.offsetParent) continue;
    seen.add(pre);
    const inner = pre.querySelector(":scope > code") || pre;
    const cut = Math.max(pre.scrollWidth - pre.clientWidth, inner.scrollWidth - inner.clientWidth);
    if (cut > 1) out.push({kind: "code", cut: Math.round(cut), ...describe(pre)});
  }
  for (const el of content.querySelectorAll("table")) {
    if (!el.offsetParent) continue;
    // Material makes the table itself scroll (display: inline-block; overflow: auto) inside a scrolling wrapper.
    let cut = el.scrollWidth - el.clientWidth;
    for (let p = el.parentElement; p && p !== content; p = p.parentElement) {
      cut = Math.max(cut, p.scrollWidth - p.clientWidth);
      if (p.classList.contains("md-typeset__scrollwrap") || p.tagName === "ARTICLE") break;
    }
    if (cut > 1) out.push({kind: "table", cut: Math.round(cut), ...describe(el)});
  }
  return out;
}
"""


def find_browser() -> str | None:
    """The Chromium executable to drive: ``$CHROMIUM``, else the first of ``CANDIDATES`` on the PATH."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env if Path(env).exists() else shutil.which(env)
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve ``site`` on a free local port (pages see the same URLs as on a web server)."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", default="site", help="the built site (default: site)")
    parser.add_argument("--shots", default="site-shots", help="folder for the screenshots (default: site-shots)")
    parser.add_argument("--page", action="append", help="check only this page (relative to --site); repeatable")
    parser.add_argument("--shot", action="append", help="screenshot this page (default: a few first pages)")
    args = parser.parse_args(argv)

    site = Path(args.site)
    if not (site / "index.html").is_file():
        print(f"{site}/index.html not found: build the site first (make docs)", file=sys.stderr)
        return 2
    browser_path = find_browser()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("playwright is not installed.\n" + INSTALL_HINT, file=sys.stderr)
        return 2
    if browser_path is None:
        print("No Chromium found.\n" + INSTALL_HINT, file=sys.stderr)
        return 2

    pages = args.page or sorted(
        str(p.relative_to(site))
        for p in site.rglob("*.html")
        if p.name != "404.html" and "assets" not in p.parts and not p.name.startswith("google")
    )
    shots = set(args.shot or DEFAULT_SHOTS)
    shots_dir = Path(args.shots)
    shots_dir.mkdir(parents=True, exist_ok=True)

    server, base = serve(site)
    total = {"code": 0, "table": 0}
    pages_cut = 0
    try:
        with sync_playwright() as pw:
            try:
                browser = pw.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
            except Exception as exc:  # noqa: BLE001 (any launch failure: say how to get a working browser)
                print(f"Could not start {browser_path}: {exc}\n" + INSTALL_HINT, file=sys.stderr)
                return 2
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            for rel in pages:
                page.goto(base + rel, wait_until="load")
                found = page.evaluate(MEASURE_JS)
                if rel in shots:
                    name = rel.replace("/", "_").removesuffix(".html") + ".png"
                    page.screenshot(path=str(shots_dir / name), full_page=False)
                if not found:
                    continue
                pages_cut += 1
                counts = {k: sum(1 for f in found if f["kind"] == k) for k in total}
                for k in total:
                    total[k] += counts[k]
                print(f"{rel}: {counts['code']} code block(s), {counts['table']} table(s) cut")
                for f in found:
                    print(f"    {f['kind']:5} +{f['cut']:4} px  [{f['where']}] {f['text']}")
            browser.close()
    finally:
        server.shutdown()

    print(
        f"{len(pages)} pages at {WIDTH} px: {total['code']} code block(s) and {total['table']} table(s) wider than "
        f"their column on {pages_cut} page(s); screenshots in {shots_dir}/"
    )
    return 1 if pages_cut else 0


if __name__ == "__main__":
    sys.exit(main())
