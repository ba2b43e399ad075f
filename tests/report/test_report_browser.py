"""report.html of a real capture, as a browser shows it (headless Chromium): every image
loads, the verdict is the first thing under the title, and a screenshot of the first screen is
kept (in the test's tmp folder)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Run in the page after it loaded (images included): what the test asserts, written into the
# DOM that --dump-dom prints.
PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const first = document.querySelector('h1').nextElementSibling;
  const verdict = document.getElementById('verdict');
  const out = {images: imgs.length,
               broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
               first: first ? first.id : null,
               firstH2: (document.querySelector('h2') || {}).textContent,
               verdictTop: verdict ? verdict.getBoundingClientRect().top : null,
               headline: (document.querySelector('#verdict .headline') || {}).textContent,
               causeTitles: [...document.querySelectorAll('#verdict table span[title]')]
                 .map(s => [s.title, s.textContent])};
  const pre = document.createElement('pre');
  pre.id = 'istrace-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--window-size=1200,1400"]

pytestmark = pytest.mark.skipif(CHROMIUM is None or os.geteuid() != 0,
                                reason="needs chromium (scripts/deps.sh) and root (testbed)")


def browser_check(page: Path, tmp: Path) -> dict:
    """What PROBE found on `page`, loaded from a copy with PROBE added."""
    probed = tmp / f"probed-{page.name}"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    r = subprocess.run([str(CHROMIUM), *FLAGS, "--virtual-time-budget=10000", "--dump-dom",
                        probed.as_uri()], capture_output=True, text=True, timeout=120,
                       check=False)
    m = re.search(r'<pre id="istrace-check">(.*?)</pre>', r.stdout, re.S)
    assert m, f"no result from the page (chromium exit {r.returncode}): {r.stderr[-1500:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">"))


def screenshot(page: Path, png: Path) -> Path:
    r = subprocess.run([str(CHROMIUM), *FLAGS, f"--screenshot={png}", page.as_uri()],
                       capture_output=True, text=True, timeout=120, check=False)
    assert png.is_file(), r.stderr[-1500:]
    return png


@pytest.fixture(scope="module")
def report_page(module_tmp) -> Path:
    """A 4 MiB-READ capture at 4 ms one-way delay, and its report."""
    out = module_tmp("browser") / "cap"
    cli = [sys.executable, "-m", "istrace.cli.main"]
    # the tree's istrace, not the machine's installed one
    env = {**os.environ, "PYTHONPATH": ":".join(str(REPO / p) for p in
                                                 ("scripts", "bpf", "decoder", "viz"))}
    r = subprocess.run([*cli, "capture", "--name", f"gl{os.getpid() % 10000}", "--delay", "4ms",
                        "--workload", "gen --size 4M --count 6", "--out", str(out),
                        "--timeout", "120"], capture_output=True, text=True, timeout=400,
                       check=False, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = subprocess.run([*cli, "report", str(out)], capture_output=True, text=True, timeout=400,
                       check=False, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out / "report.html"


def test_images_load_and_the_verdict_comes_first(report_page: Path, tmp_path: Path) -> None:
    got = browser_check(report_page, tmp_path)
    assert got["images"] >= 6 and got["broken"] == [], got
    assert got["first"] == "verdict" and got["firstH2"] == "Verdict", got
    assert 0 <= got["verdictTop"] < 200, got  # on the first screen, right under the title
    # the run in the headline: throughput, command size, outstanding, delay
    for part in ("MB/s of READ data", "4 MiB commands", "at most 1 outstanding",
                 "one-way delay 4 ms"):
        assert part in got["headline"], got["headline"]
    # causes in words, their ids only as tooltips
    assert got["causeTitles"], got
    for cause, words in got["causeTitles"]:
        assert re.fullmatch(r"[a-z0-9_]+", cause) and cause not in words and " " in words


def test_first_screen_screenshot(report_page: Path, tmp_path: Path) -> None:
    png = screenshot(report_page, tmp_path / "report-first-screen.png")
    im = Image.open(png).convert("L")
    assert im.size == (1200, 1400)
    # text drawn: the first screen is not blank
    dark = im.point(lambda p: 255 if p < 128 else 0).histogram()[255]
    assert im.getextrema()[0] < 64 and dark > 5000


def test_a_broken_image_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><html><body><h1>t</h1><section id='verdict'><h2>Verdict"
                    "</h2></section><img alt='bad' src='data:image/png;base64,AAAA'></body>"
                    "</html>")
    assert browser_check(page, tmp_path)["broken"] == ["bad"]
