"""tools/gpu_driver.py, the harness the device-side GPU checks share: a step's record, the results file, the
shipped settings filled in for a device run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.paths import ROOT

# Loaded from its file: tools/ on sys.path would put its scripts' names before other modules of this session.
_spec = importlib.util.spec_from_file_location("gpu_driver", ROOT / "tools" / "gpu_driver.py")
assert _spec is not None and _spec.loader is not None
gpu_driver = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_driver)


def run_in(tmp_path: Path, budget_s: float = 100.0) -> gpu_driver.DriverRun:
    return gpu_driver.DriverRun({"steps": {}}, tmp_path / "out" / "check.json", budget_s, t0=0.0)


def saved(run: gpu_driver.DriverRun) -> dict[str, Any]:
    return json.loads(run.results_file.read_text())  # type: ignore[no-any-return]


def test_a_step_records_its_result_and_saves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_in(tmp_path)
    record = run.step("one", lambda a, b: {"sum": a + b}, 2, 3, shown_chars=20)
    assert record["ok"] is True and record["out"] == {"sum": 5} and record["s"] >= 0
    assert saved(run)["steps"]["one"] == record
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("== one (") and len(printed[1]) == len("   one: ") + 20


def test_a_failing_step_records_the_error_and_its_trace(tmp_path: Path) -> None:
    def fails() -> None:
        raise KeyboardInterrupt("stop")  # a BaseException too: the driver goes on to its next step

    record = run_in(tmp_path).step("two", fails, shown_chars=2000)
    assert record["ok"] is False and record["error"] == "KeyboardInterrupt: stop"
    assert "in fails" in record["trace"]


def test_a_skip_is_saved_with_its_reason(tmp_path: Path) -> None:
    run = run_in(tmp_path, budget_s=0.0)
    assert run.left() < 0
    run.skip("three", "no time")
    assert saved(run)["steps"] == {"three": {"skipped": "no time"}}


@pytest.mark.parametrize("gpus", [None, "0"])
def test_the_shipped_settings_with_a_device_runs_values(tmp_path: Path, gpus: str | None) -> None:
    shipped = yaml.safe_load((ROOT / "config" / "server.yaml").read_text())
    s = gpu_driver.shipped_settings(
        shipped, Path("/ck"), "tiny", 8000, Path("/media"), tmp_path, gpus, {"api_server_count": 4}
    )
    assert s["gpus"] == (shipped["gpus"] if gpus is None else gpus)
    assert (s["model"], s["port"], s["media_dir"], s["api_server_count"]) == ("/ck", 8000, "/media", 4)
    assert s["ready_file"] == str(tmp_path / "ready.json")
    assert s["env"]["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    own_env = shipped.get("env") or {}
    assert {k: v for k, v in s["env"].items() if k in own_env} == own_env
    assert shipped == yaml.safe_load((ROOT / "config" / "server.yaml").read_text())  # left as it was
