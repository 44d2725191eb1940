"""The executables by the names the README gives them: in the development environment (`./run exec NAME`,
which puts scripts/ on PATH) they start and answer --help."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("reasoner_node", "cosmos-reasoner-bag", "cosmos-reasoner-server", "cosmos-reasoner-parse")


@pytest.mark.skipif(
    "COSMOS_REASONER_ROOT" not in os.environ, reason="needs the environment of ./run (run it with ./run exec)"
)
@pytest.mark.parametrize("tool", TOOLS)
def test_tools_answer_by_their_names(tool: str) -> None:
    found = shutil.which(tool)
    assert found is not None and Path(found).resolve() == (ROOT / "scripts" / tool).resolve()
    done = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-500:]
