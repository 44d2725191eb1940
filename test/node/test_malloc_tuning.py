"""malloc_tuning: glibc takes the settings (Linux); the call is harmless where it runs twice."""

from __future__ import annotations

import subprocess
import sys


def test_glibc_takes_the_settings_in_a_fresh_process() -> None:
    code = (
        "from cosmos_reasoner_ros.node.malloc_tuning import tune_malloc; print(tune_malloc(), tune_malloc())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
