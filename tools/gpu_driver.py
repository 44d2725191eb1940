"""What the device-side GPU checks (gpu_check.py, dp_gpu_check.py, and gpu_check_edge.py through gpu_check)
share: the run's budget and results file saved as it goes, a step that records its outcome, and the
real-vLLM tier's helpers pointed at the GPU's vLLM with the shipped server settings.
Imported from beside them (a script's own folder is first on sys.path)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


class DriverRun:
    """One driver run: what is left of its budget; its results, written to `results_file` after each step."""

    def __init__(self, results: dict[str, Any], results_file: Path, budget_s: float, t0: float) -> None:
        self.results, self.results_file, self.budget_s, self.t0 = results, results_file, budget_s, t0

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def save(self) -> None:
        self.results_file.parent.mkdir(parents=True, exist_ok=True)
        self.results_file.write_text(json.dumps(self.results, indent=1, default=str))

    def skip(self, name: str, reason: str) -> None:
        self.results["steps"][name] = {"skipped": reason}
        self.save()

    def step(self, name: str, fn: Callable[..., Any], *args: Any, shown_chars: int) -> dict[str, Any]:
        """Run fn(*args) as the step `name`: its result or its error and trace, and its seconds, recorded and
        saved, then printed (the first `shown_chars` characters)."""
        started = time.monotonic()
        print(f"== {name} ({self.left():.0f} s left)", flush=True)
        steps = self.results["steps"]
        try:
            steps[name] = {"ok": True, "out": fn(*args)}
        except BaseException as err:
            steps[name] = {
                "ok": False,
                "error": f"{type(err).__name__}: {err}"[:3000],
                "trace": traceback.format_exc()[-3000:],
            }
        steps[name]["s"] = round(time.monotonic() - started, 1)
        self.save()
        print(f"   {name}: {json.dumps(steps[name], default=str)[:shown_chars]}", flush=True)
        return steps[name]


def shipped_settings(
    shipped: dict[str, Any],
    checkpoint: Path | None,
    served_name: str,
    port: int,
    media_dir: Path,
    work_dir: Path,
    gpus: str | None,
    overrides: dict[str, Any],
) -> dict[str, Any]:
    """The shipped config/server.yaml with what a device run must fill in: the checkpoint, port, media dir,
    GPUs (left as shipped where None), a fresh cache, and VLLM_USE_FLASHINFER_SAMPLER=0 (FlashInfer is not
    carried to the device); then `overrides`."""
    settings = dict(shipped)
    settings.update(
        {
            "mode": "native",
            "model": str(checkpoint),
            "served_model_name": served_name,
            "host": "127.0.0.1",
            "port": port,
            "media_dir": str(media_dir),
            **({} if gpus is None else {"gpus": gpus}),
            "cache_dir": "/tmp/vcache",
            "ready_file": str(work_dir / "ready.json"),
            "start_timeout_s": 600.0,
            "env": {
                **(shipped.get("env") or {}),
                "VLLM_USE_FLASHINFER_SAMPLER": "0",
                "HF_HUB_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
            },
        }
    )
    settings.update(overrides)
    return settings


def point_tier_at_gpu(
    tier: ModuleType, settings: Callable[..., dict[str, Any]], checkpoint: Path | None
) -> None:
    """As ../shared/gpu-check/example_driver.py: the tier's helpers pointed at the GPU's vLLM (this Python's),
    the checkpoint given, and `settings` for every server the tier starts."""
    tier.tiny_server_settings = settings
    tier.missing_reason = lambda: None
    tier.tiny_checkpoint = lambda layout="qwen3vl": checkpoint
    tier.vllm_python = lambda: Path(sys.executable)


def python_output(code: str) -> str:
    """What this Python prints running `code` in a fresh process (the versions of what it has installed)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
