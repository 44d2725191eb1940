"""Structured answers in each JSON form a server can be told to write, on the vLLM CPU tier (the tiny random
checkpoint) or, through the GPU driver, on the H200.

One server per form (--forms), one after the other: `xgrammar` (backend xgrammar, disable_any_whitespace:
", " and ": " before vLLM 0.32, compact from 0.32), `guidance` (backend guidance, disable_any_whitespace:
compact JSON in every release) and `xgrammar-free` (vLLM's default free whitespace). Each structured task
of the shipped catalog is asked N times as the node asks it (structured output on, the robot clip or its
first frame), with answers cut at --max-tokens. Per task and server: median completion tokens and latency,
how many answers were cut off (finish length), how many were complete JSON, the share of the answer's
characters that compact JSON would not need, and the completion tokens spent on them (the answer's tokens
less those of the same JSON written compactly, with the checkpoint's tokenizer). Prints JSON on its last
line and writes bench/results/structured_whitespace.json.
    ./run exec python bench/structured_whitespace.py [--requests 7] [--max-tokens 1024]
        [--forms xgrammar guidance]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import cv2
from figures import write_figures
from support import vllm_tier
from support.paths import ROBOT_CLIP

from cosmos_reasoner_ros.clips import MediaRef
from cosmos_reasoner_ros.reasoner import (
    ClientSettings,
    ReasonerClient,
    RequestSettings,
    TaskCatalog,
    build_request,
)

FORMS: dict[str, dict[str, Any]] = {
    "xgrammar": {"backend": "xgrammar", "disable_any_whitespace": True},
    "guidance": {
        "backend": "guidance",
        "disable_any_whitespace": True,
        "disable_additional_properties": True,
    },
    "xgrammar-free": {"backend": "xgrammar", "disable_any_whitespace": False},
}
VALUES = {"task": "put the charger in the box", "object": "the charger", "event": "the arm lifts the charger"}


def media(media_dir: Path) -> dict[str, MediaRef]:
    clip = media_dir / "clip.mp4"
    shutil.copyfile(ROBOT_CLIP, clip)
    capture = cv2.VideoCapture(str(ROBOT_CLIP))
    ok, frame = capture.read()
    capture.release()
    assert ok
    image = media_dir / "frame.jpg"
    cv2.imwrite(str(image), frame)
    height, width = frame.shape[:2]
    return {
        "video": MediaRef(
            "video", clip.as_uri(), clip, "video/mp4", clip.stat().st_size, 0.0, width, height, fps=4.0
        ),
        "image": MediaRef(
            "image", image.as_uri(), image, "image/jpeg", image.stat().st_size, 0.0, width, height
        ),
    }


def padding_share(text: str) -> float | None:
    """The share of the answer's characters compact JSON would not need; None when it is not complete JSON."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return 1 - len(json.dumps(value, separators=(",", ":"), ensure_ascii=False)) / max(len(text), 1)


_COUNT = r"""
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
print(json.dumps([len(tok.encode(t, add_special_tokens=False)) for t in json.load(sys.stdin)]))
"""


def compact_tokens(texts: list[str], checkpoint: Path) -> list[int]:
    """Tokens of each answer's JSON written compactly (no whitespace between its tokens)."""
    compact = [json.dumps(json.loads(t), separators=(",", ":"), ensure_ascii=False) for t in texts]
    done = subprocess.run(
        [str(vllm_tier.vllm_python()), "-c", _COUNT, str(checkpoint)],
        input=json.dumps(compact),
        capture_output=True,
        text=True,
        env=vllm_tier.clean_env(),
        check=True,
    )
    counts: list[int] = json.loads(done.stdout)
    return counts


def measure(server: vllm_tier.SupervisedServer, n: int, max_tokens: int) -> dict[str, Any]:
    assert server.media_dir is not None
    refs = media(server.media_dir)
    catalog = TaskCatalog.load()
    structured = [name for name in catalog.names() if catalog.spec(name).json_schema is not None]
    settings = RequestSettings(structured_output=True, max_tokens=max_tokens)
    out: dict[str, Any] = {}
    with ReasonerClient(ClientSettings(base_url=server.base_url, read_timeout_s=600)) as client:
        for name in structured:  # one each first: first-request costs are not what is compared
            task = catalog.render(name, **VALUES)
            client.complete(build_request(task, [refs[task.media]], settings), stream=True)
        for name in structured:
            task = catalog.render(name, **VALUES)
            rows = []
            for _ in range(n):
                completion = client.complete(build_request(task, [refs[task.media]], settings), stream=True)
                answer = completion.text or completion.reasoning or ""
                rows.append(
                    (completion.completion_tokens, completion.latency_s, completion.finish_reason, answer)
                )
            shares = [s for s in (padding_share(r[3]) for r in rows) if s is not None]
            whole = [r for r in rows if padding_share(r[3]) is not None and r[2] == "stop"]
            assert server.checkpoint is not None
            compact = compact_tokens([r[3] for r in whole], server.checkpoint)
            spent = [r[0] - c for r, c in zip(whole, compact, strict=True)]
            out[name] = {
                "completion_tokens": statistics.median(r[0] for r in rows),
                "latency_s": round(statistics.median(r[1] for r in rows), 3),
                "cut_off": sum(r[2] == "length" for r in rows),
                "complete_json": len(shares),
                "padding_share": round(statistics.median(shares), 3) if shares else None,
                "padding_tokens": statistics.median(spent) if spent else None,
                "padding_token_share": round(
                    statistics.median(s / r[0] for s, r in zip(spent, whole, strict=True)), 3
                )
                if spent
                else None,
                "example": rows[0][3][:160],
            }
            print(f"{name}: {json.dumps(out[name])}", file=sys.stderr)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=7)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--forms", nargs="+", choices=list(FORMS), default=["xgrammar", "guidance"])
    args = parser.parse_args()
    reason = vllm_tier.missing_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    figures: dict[str, Any] = {
        "cpu_cores": len(os.sched_getaffinity(0)),
        "load_before": os.getloadavg()[0],
        "requests": args.requests,
        "max_tokens": args.max_tokens,
    }
    for name in args.forms:
        with vllm_tier.SupervisedServer(overrides={"structured_outputs": FORMS[name]}) as server:
            figures[name] = measure(server, args.requests, args.max_tokens)
            figures[name]["vllm_version"] = server.ready.get("vllm_version")
    base = args.forms[0]
    figures["ratio_to_" + base] = {
        form: {
            task: {
                "completion_tokens": round(
                    figures[form][task]["completion_tokens"]
                    / max(figures[base][task]["completion_tokens"], 1),
                    2,
                ),
                "latency": round(
                    figures[form][task]["latency_s"] / max(figures[base][task]["latency_s"], 1e-3), 2
                ),
            }
            for task in figures[base]
            if task != "vllm_version"
        }
        for form in args.forms[1:]
    }
    figures["load_after"] = os.getloadavg()[0]
    write_figures("structured_whitespace", figures, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
