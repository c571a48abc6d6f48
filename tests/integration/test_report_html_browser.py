"""The HTML report in a real headless Chromium: it renders without errors, shows its tables and plots."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from report_scenario import make_db, write_config  # noqa: E402

from hivebatch.cli.hadmin.main import cli  # noqa: E402

CHROMIUM = os.environ.get("HIVEBATCH_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Added to the test's copy of the page only: records script errors and whether every image decoded.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message || e.type)), true);
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  document.body.dataset.images = imgs.length;
  document.body.dataset.imagesDecoded = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.errors = window.__errors.length;
  document.body.dataset.pageWidth = document.documentElement.scrollWidth;
});
</script>"""


class TableCounter(HTMLParser):
    """Rows per table id, and the body's data attributes, from the DOM Chromium dumped."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, int] = {}
        self.body: dict[str, str] = {}
        self._table: str | None = None
        self._in_tbody = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body":
            self.body = {k: v or "" for k, v in a.items()}
        elif tag == "table":
            self._table = a.get("id") or "?"
            self.rows.setdefault(self._table, 0)
        elif tag == "tbody":
            self._in_tbody = True
        elif tag == "tr" and self._table and self._in_tbody:
            self.rows[self._table] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_tbody = False
        elif tag == "table":
            self._table = None


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.integration
def test_report_renders_in_headless_chromium(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install chromium"
    config = write_config(tmp_path)
    make_db(tmp_path / "hivebatch.db")
    monkeypatch.setenv("HIVEBATCH_CONFIG", str(config))
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    page = tmp_path / "report.html"
    result = CliRunner().invoke(
        cli, ["report", "html", "--since", "2026-11-16", "--until", "2026-11-16T10:00", "--no-slurm", str(page)],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["'](https?:)?//""", html), (
        "the report must not load anything from the network"
    )
    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("</head>", PROBE + "</head>", 1), encoding="utf-8")

    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
    try:
        dump = _chromium(["--virtual-time-budget=5000", "--dump-dom", probed.as_uri()], profile)
        shot = tmp_path / "report.png"
        screenshot = _chromium(["--window-size=1400,2400", f"--screenshot={shot}", page.as_uri()], profile)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert dump.returncode == 0, dump.stderr[-2000:]
    parser = TableCounter()
    parser.feed(dump.stdout)
    assert parser.body.get("data-errors") == "0", f"script errors while rendering: {dump.stderr[-2000:]}"
    assert parser.body.get("data-images") == "3"
    assert parser.body.get("data-images-decoded") == "3", "a plot image did not decode"
    assert int(parser.body.get("data-page-width", "99999")) <= 1400, "the page is wider than a laptop screen"
    # usage and wait tables: one row per VC; users: one per user; missed: the two late jobs;
    # waiting: the two pending jobs; map: 4 nodes
    assert parser.rows == {"usage": 3, "wait": 3, "missed": 2, "waiting": 2, "users": 3, "gpumap": 4}
    assert "full: 88% of its reservation used, 1 pending, oldest waits 8.0h" in dump.stdout
    assert screenshot.returncode == 0, screenshot.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 50_000  # a blank page compresses to a few KiB
