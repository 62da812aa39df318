"""Render jaxtune's HTML reports in headless Chromium, screenshot them and check them.

    python tools/render_reports.py OUT               # runs `jaxtune demo` first (about 2 min)
    python tools/render_reports.py OUT --trace DIR --cache DIR   # reuse a demo's trace/cache

Writes OUT/report.html (``jaxtune report TRACE --html``) and OUT/sweeps.html (``jaxtune
cache show --html``), a screenshot of each (OUT/*.png), and exits 1 when a page is blank,
logs anything to the browser console, refers to the network, or lacks one of its charts.
``nox -s browser`` runs it; ``docs/images/`` holds screenshots made by it.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

#: The charts each page must show (``<figure class="chart" data-chart=NAME><svg ...``).
PAGES = {
    "report.html": ("share", "roofline", "timeline"),
    "sweeps.html": ("sweep",),
}
HEIGHTS = {"report.html": 2300, "sweeps.html": 1900}
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
    shot = browse(page, f"--window-size=1280,{HEIGHTS[page.name]}", f"--screenshot={png}")
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
