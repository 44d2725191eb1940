"""What the bag tools' tests check of a report: JUnit XML against the junit-10 schema (Jenkins xunit-plugin's,
as pytest validates its own; vendored in test/bag/report/), and the images of an HTML page loaded by headless
Chromium."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support.paths import ROOT

SCHEMA = ROOT / "test" / "bag" / "report" / "junit-10.xsd"
CHROMIUM = Path("/usr/bin/chromium")


def validate(path: Path) -> None:
    """Assert that the JUnit file is valid against the junit-10 schema."""
    from lxml import etree

    schema = etree.XMLSchema(etree.parse(str(SCHEMA)))
    doc = etree.parse(str(path))
    assert schema.validate(doc), schema.error_log


def chromium_image_widths(index: Path, tmp_path: Path) -> list[int]:
    """Open the page in headless Chromium and read back each image's naturalWidth (0: failed to load)."""
    probe = index.with_name("probe.html")
    script = (
        "<script>window.addEventListener('load', () => { document.body.setAttribute('data-widths', "
        "Array.from(document.images).map(i => i.complete ? i.naturalWidth : -1).join(',')); });</script>"
    )
    probe.write_text(index.read_text().replace("</body>", script + "</body>"))
    out = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    match = re.search(r'data-widths="([^"]*)"', out.stdout)
    assert match, f"no data-widths in the dumped DOM: {out.stdout[:500]}"
    return [int(w) for w in match.group(1).split(",")]
