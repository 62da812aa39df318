"""Render jaxtune's HTML reports in headless Chromium, screenshot them and check them.

    python tools/render_reports.py OUT               # runs `jaxtune demo` first (about 2 min)
    python tools/render_reports.py OUT --trace DIR --cache DIR   # reuse a demo's trace/cache

Writes OUT/report.html (``jaxtune report TRACE --html``) and OUT/sweeps.html (``jaxtune
cache show --html``), a screenshot of each in a 1400 px window (OUT/*.png), and exits 1
when a page is blank, logs anything to the browser console, refers to the network, lacks
one of its charts, has, laid out at 1400 px, an element wider than its box or the window,
or does not show the stored config and the pass timed (:func:`layout`). ``nox -s
browser`` runs it; ``docs/images/`` holds screenshots made by it;
``tests/test_pages_in_browser.py`` runs :func:`layout` on pages built from fixtures.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

#: The charts each page must show (``<figure class="chart" data-chart=NAME><svg ...``).
PAGES = {
    "report.html": ("share", "roofline", "timeline"),
    "sweeps.html": ("sweep",),
}
HEIGHTS = {"report.html": 2600, "sweeps.html": 2000}
#: The window the pages are checked in.
WIDTH = 1400

#: Added to a copy of a page (the pages themselves hold no script): measures, after
#: layout, every element that is wider than its own box or reaches past the window, and
#: reads the text and box of each element that a CSS selector of ``WANTED`` selects.
_PROBE = """<script>
(() => {
  const W = document.documentElement.clientWidth;
  const name = (el) => {
    let s = el.tagName.toLowerCase();
    if (typeof el.className === "string" && el.className) s += "." + el.className;
    const tag = el.dataset && (el.dataset.table || el.dataset.chart);
    return tag ? s + "[" + tag + "]" : s;
  };
  const overflow = [];
  for (const el of document.querySelectorAll("body *")) {
    if (el.closest("svg") && el.tagName.toLowerCase() !== "svg") continue;
    const r = el.getBoundingClientRect();
    if (r.right > W + 0.5) overflow.push(name(el) + " reaches " + Math.round(r.right) + " px");
    const style = getComputedStyle(el);
    if (style.display !== "inline" && el.clientWidth && el.scrollWidth > el.clientWidth + 1)
      overflow.push(name(el) + " holds " + el.scrollWidth + " px in " + el.clientWidth);
  }
  const wanted = {};
  for (const sel of WANTED) {
    wanted[sel] = [...document.querySelectorAll(sel)].map((el) => {
      const r = el.getBoundingClientRect();
      return {text: el.textContent, left: r.left, right: r.right, width: r.width,
              height: r.height, shown: getComputedStyle(el).visibility === "visible"};
    });
  }
  const out = document.createElement("pre");
  out.id = "jaxtune-layout";
  out.textContent = JSON.stringify({
    window: W, page: document.documentElement.scrollWidth, overflow, wanted});
  document.body.appendChild(out);
})();
</script>"""
#: What each page must show in the window: the stored config and the pass timed.
SHOWN = {
    "report.html": ('table[data-table="autotuned"] td',),
    "sweeps.html": ("p.stored code", "p.stored .pass"),
}
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    sys.exit("render_reports: no chromium on PATH; install it (apt-get install -y chromium)")


def jaxtune(*args: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "jaxtune", *args], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        sys.exit(f"render_reports: jaxtune {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def browse(page: pathlib.Path, *extra: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="jaxtune-chromium-") as profile:
        return subprocess.run(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )


def layout(page: pathlib.Path, wanted: tuple[str, ...] = (), width: int = WIDTH) -> dict[str, Any]:
    """``page`` laid out by headless Chromium in a ``width`` px window: ``window`` and
    ``page`` (the document's scroll width), ``overflow`` (each element wider than its box
    or reaching past the window), and ``wanted``: for each CSS selector, the text and box
    of every element it selects."""
    with tempfile.TemporaryDirectory(prefix="jaxtune-layout-") as folder:
        probe = pathlib.Path(folder) / page.name
        script = _PROBE.replace("WANTED", json.dumps(list(wanted)))
        probe.write_text(page.read_text().replace("</body>", script + "</body>"))
        dom = browse(probe, f"--window-size={width},1000", "--dump-dom")
    found = re.search(r'<pre id="jaxtune-layout">(.*?)</pre>', dom.stdout, flags=re.S)
    if not found:
        raise RuntimeError(f"Chromium gave no layout for {page}: {dom.stderr[-500:]}")
    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return result


def ink(png: pathlib.Path) -> float:
    """The fraction of the screenshot's pixels that are not (nearly) white."""
    from PIL import Image

    grey = Image.open(png).convert("L")
    histogram = grey.histogram()
    return 1 - sum(histogram[245:]) / (grey.width * grey.height)


def check(page: pathlib.Path, charts: tuple[str, ...]) -> list[str]:
    """Screenshots ``page`` beside itself and returns what is wrong with it."""
    problems = []
    png = page.with_suffix(".png")
    shot = browse(page, f"--window-size={WIDTH},{HEIGHTS[page.name]}", f"--screenshot={png}")
    dom = browse(page, "--dump-dom")
    for proc in (shot, dom):
        problems += [f"console: {line}" for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    if not png.is_file():
        problems.append(f"no screenshot ({shot.returncode}): {shot.stderr[-500:]}")
    elif ink(png) < 0.02:
        problems.append(f"blank page: {ink(png):.1%} of the screenshot is not white")
    shown = set(re.findall(r'<figure class="chart" data-chart="(\w+)"><svg', dom.stdout))
    problems += [f"missing chart {name!r}" for name in charts if name not in shown]
    if re.search(r"(src|href)=\"?(https?:)?//", dom.stdout):
        problems.append("the page refers to the network")
    laid = layout(page, SHOWN[page.name])
    problems += [f"at {WIDTH} px: {o}" for o in laid["overflow"]]
    for selector, boxes in laid["wanted"].items():
        if not any(b["width"] > 0 and b["right"] <= WIDTH and b["shown"] for b in boxes):
            problems.append(f"at {WIDTH} px: nothing shown for {selector}")
    return [f"{page.name}: {p}" for p in problems]


def demo(out: pathlib.Path, env: dict[str, str]) -> pathlib.Path:
    text = jaxtune("demo", env=env)
    (out / "demo.txt").write_text(text)
    traces = re.findall(r"^trace: (.+)$", text, flags=re.M)
    if not traces:
        sys.exit("render_reports: the demo printed no `trace:` line")
    return pathlib.Path(traces[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--trace", type=pathlib.Path, help="a demo's trace (skip the demo)")
    parser.add_argument("--cache", type=pathlib.Path, help="the demo's JAXTUNE_CACHE_DIR")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["JAXTUNE_CACHE_DIR"] = str(args.cache or args.out / "cache")
    trace = args.trace or demo(args.out, env)
    jaxtune("report", str(trace), "--html", str(args.out / "report.html"), env=env)
    jaxtune("cache", "show", "--html", str(args.out / "sweeps.html"), env=env)
    problems = [p for name, charts in PAGES.items() for p in check(args.out / name, charts)]
    for problem in problems:
        print(f"render_reports: {problem}", file=sys.stderr)
    print(
        f"render_reports: {len(PAGES) - len({p.split(':')[0] for p in problems})} of "
        f"{len(PAGES)} pages passed; screenshots in {args.out}"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
