"""How tall each committed notebook is as a reader sees it: nbconvert HTML with `notebooks/offline.html.j2` (nothing
loaded from a network), opened in headless Chromium at `WIDTH_PX` wide; its page height is measured and a screenshot
saved to `notebooks/img/<notebook>.png` (linked from the README).

    workbench notebook_pages                 # every notebook: height in px, screenshot written
    workbench notebook_pages --no-screenshot notebooks/04_traces.ipynb

Needs nbconvert (`.[dev]`) and a Chromium (`--chromium`, default $CHROMIUM or the first of `CHROMIUMS` found)."""
from __future__ import annotations

from workbench.paths import REPO_ROOT
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = REPO_ROOT
TEMPLATE = os.path.join(REPO, "notebooks", "offline.html.j2")
WIDTH_PX = 1400
MAX_PAGE_PX = 8000
"""The tallest page a reader is asked to scroll through."""
CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "chrome")
REMOTE = re.compile(r"<(?:script|link)[^>]+(?:src|href)=[\"']?(?:https?:)?//", re.I)
"""A script or stylesheet loaded from a network."""
class PageError(Exception):
    """A page that cannot be rendered or measured here (no Chromium, a remote load): one line, rc 2."""


_MEASURE = ("<script>window.addEventListener('load', function () {"
            "document.body.setAttribute('data-page-px', document.documentElement.scrollHeight);});</script>")


def html(path: str) -> str:
    """The notebook's offline nbconvert HTML (its committed outputs, not re-executed)."""
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_file=TEMPLATE).from_notebook_node(nbformat.read(path, as_version=4))
    return body


def remote_loads(page: str) -> list[str]:
    """The script / stylesheet tags of `page` that load from a network (none in an offline page)."""
    return [m.group(0) for m in REMOTE.finditer(page)]


def chromium(explicit: str | None = None) -> str:
    """The Chromium binary: `explicit` (which must exist), else $CHROMIUM, else the first of `CHROMIUMS` on PATH."""
    if explicit:
        if not shutil.which(explicit):
            raise PageError(f"notebook_pages: no Chromium at {explicit}")
        return shutil.which(explicit)
    for c in (os.environ.get("CHROMIUM"), *CHROMIUMS):
        if c and shutil.which(c):
            return shutil.which(c)
    raise PageError("notebook_pages: no Chromium found (pass --chromium PATH or set CHROMIUM)")


def _chrome(exe: str, *args: str) -> str:
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--allow-file-access-from-files",
           "--virtual-time-budget=10000", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise PageError(f"notebook_pages: chromium failed (rc {r.returncode}): {r.stderr.strip()[-300:]}")
    return r.stdout


def page_px(exe: str, html_path: str) -> int:
    """The page's scroll height in px at `WIDTH_PX` wide, after load (images laid out)."""
    dom = _chrome(exe, f"--window-size={WIDTH_PX},1000", "--dump-dom", "file://" + html_path)
    m = re.search(r'data-page-px="(\d+)"', dom)
    if not m:
        raise PageError(f"notebook_pages: no height measured for {html_path}")
    return int(m.group(1))


def screenshot(exe: str, html_path: str, png: str, height_px: int) -> None:
    """A full-page screenshot at `WIDTH_PX` wide, palette-quantized (octree, 256 colours: every colour of the
    palette kept apart) to keep the committed file small."""
    _chrome(exe, f"--window-size={WIDTH_PX},{height_px}", f"--screenshot={png}", "file://" + html_path)
    from PIL import Image

    with Image.open(png) as im:
        # octree keeps a legend's small swatches apart (median cut at 128 colours merged exposed_copy into sync_stall)
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(png, optimize=True)


def measure(paths: list[str], shots: str | None, exe: str) -> dict[str, int]:
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for p in paths:
            name = os.path.splitext(os.path.basename(p))[0]
            page = html(p)
            bad = remote_loads(page)
            if bad:
                raise PageError(f"notebook_pages: {name} loads from a network: {bad[0][:120]}")
            hp = os.path.join(d, name + ".html")
            with open(hp, "w") as f:
                f.write(page.replace("</body>", _MEASURE + "</body>", 1))
            out[name] = page_px(exe, hp)
            if shots:
                os.makedirs(shots, exist_ok=True)
                screenshot(exe, hp, os.path.join(shots, name + ".png"), out[name])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="workbench notebook_pages", description=__doc__.split("\n\n")[0])
    p.add_argument("notebooks", nargs="*", help="default: notebooks/*.ipynb")
    p.add_argument("--img", default=os.path.join(REPO, "notebooks", "img"),
                   help="folder for the screenshots (default: notebooks/img)")
    p.add_argument("--no-screenshot", action="store_true", help="measure only")
    p.add_argument("--chromium", default=None, help="the Chromium binary (default: $CHROMIUM or one on PATH)")
    a = p.parse_args(argv)
    paths = a.notebooks or sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb")))
    missing = [x for x in paths if not os.path.isfile(x)]
    if missing:
        print(f"notebook_pages: no such notebook: {missing[0]}", file=sys.stderr)
        return 2
    try:
        heights = measure(paths, None if a.no_screenshot else a.img, chromium(a.chromium))
    except PageError as e:
        print(e, file=sys.stderr)
        return 2
    for name, px in heights.items():
        print(f"{name}: {px} px at {WIDTH_PX} px wide" + ("" if px <= MAX_PAGE_PX else f" (over {MAX_PAGE_PX})"))
    return 0 if all(px <= MAX_PAGE_PX for px in heights.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
