"""The wall-clock bounds the tests used to assert, measured here instead: how long pathological answers take
to parse, how soon a request past its read timeout ends, how soon `--mode external` gives up on a server that
never answers, and how soon a stopping supervisor's warm-up returns. The tests keep what happens (the error
kind, the exit code, what was said); the time it took is a figure of this machine, with its goal beside it.

Prints the figures as JSON on its last line and writes them to bench/results/time_bounds.json.
    ./run exec python bench/time_bounds.py [--repeats 3]
Goals (the bounds the tests held): each pathological parse < 1.0 s; a 0.5 s read timeout ends the request
< 2.5 s after it began; external mode with a 0.5 s start timeout exits < 10 s; a stopped warm-up returns
< 60 s (its server would have taken 120 s).
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from support.data_parallel import robot_buffer
from support.paths import BENCH_RESULTS, ROBOT_CLIP
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.clips.clip_writer import ClipWriter
from cosmos_reasoner_ros.clips.media_store import MediaStore
from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.parsing import parse_answer
from cosmos_reasoner_ros.reasoner.request_builder import RequestSettings
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog
from cosmos_reasoner_ros.requests.outcome import RequestSpec
from cosmos_reasoner_ros.requests.pipeline import Pipeline, PipelineSettings
from cosmos_reasoner_ros.server import cli, errors, grammar_check, warmup
from cosmos_reasoner_ros.server.settings import ServerSettings

RESULT = BENCH_RESULTS / "time_bounds.json"
# The inputs of test/reasoner/test_parsing.py::test_pathological_text_is_fast.
PATHOLOGICAL = {
    "brackets": "[" * 50_000,
    "braces": "{" * 50_000,
    "open_list": "[1," * 30_000,
    "nested_objects": '{"a": [' * 5_000,
    "fences": "```" * 10_000,
}
GOALS_S = {"parse_max": 1.0, "read_timeout_end": 2.5, "external_gives_up": 10.0, "stopped_warmup": 60.0}


def timed(run: Callable[[], object]) -> tuple[float, object]:
    started = time.monotonic()
    value = run()
    return time.monotonic() - started, value


def parse_times() -> dict[str, float]:
    """Each pathological answer refused (ParseError), and how long that took."""
    took = {}
    for name, text in PATHOLOGICAL.items():
        started = time.monotonic()
        try:
            parse_answer(text, "points")
        except ParseError:
            pass
        else:
            raise AssertionError(f"{name}: parsed, expected a ParseError")
        took[name] = time.monotonic() - started
    return took


def read_timeout_end(media: Path) -> float:
    """test/requests/test_pipeline.py::test_server_down_and_timeout's last request: a 0.5 s read timeout
    against a server answering after 3 s; the time until its timeout outcome."""
    with ScriptedServer(default=ScriptedReply(delay_s=3.0)) as slow:
        client = ReasonerClient(
            ClientSettings(base_url=slow.base_url, max_retries=0, read_timeout_s=0.5, connect_timeout_s=1.0)
        )
        pipeline = Pipeline(
            robot_buffer(ROBOT_CLIP),
            ClipWriter(MediaStore(media)),
            TaskCatalog.load(),
            client,
            RequestSettings(),
            PipelineSettings(clip_seconds=2.0),
        )
        took, out = timed(lambda: pipeline.run(RequestSpec("s", "next_action")))
    assert out.error_kind == "timeout", out  # type: ignore[attr-defined]
    return took


def external_gives_up() -> float:
    """test/server/test_supervisor.py::test_external_mode_gives_up_when_nothing_answers: exit 6, how soon."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    argv = ["--mode", "external", "--server-url", url, "--start-timeout-s", "0.5"]
    took, code = timed(lambda: cli.main(argv))
    assert code == errors.EXIT_NOT_READY, code
    return took


def stopped_warmup(media: Path) -> float:
    """test/server/test_warmup.py::test_a_stopping_supervisor_does_not_wait_for_the_warm_up: the stop comes
    once the first warm-up request is at a server that answers after 120 s; how soon the warm-up returns."""
    stop = threading.Event()
    said: list[str] = []
    grammars = grammar_check.structured_tasks(ServerSettings())
    with ScriptedServer(default=ScriptedReply(delay_s=120)) as server:
        settings = ServerSettings(mode="qwen3vl", server_url=server.url, media_dir=str(media))
        run = warmup.Warmup(settings, "0.32.0", grammars, True, said.append, 300.0, stop)
        threading.Thread(target=lambda: server.wait_requests(1, 60) and stop.set(), daemon=True).start()
        took, _ = timed(run.run)
    assert said == ["warm-up: stopped (the supervisor is stopping)"], said
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    parse_runs: list[dict[str, float]] = []
    timeouts, externals, warmups = [], [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="time-bounds-") as work:
            parse_runs.append(parse_times())
            timeouts.append(read_timeout_end(Path(work) / "media"))
            externals.append(external_gives_up())
            warmups.append(stopped_warmup(Path(work) / "warmup"))
    worst = {
        "parse_max": max(max(run.values()) for run in parse_runs),
        "read_timeout_end": max(timeouts),
        "external_gives_up": max(externals),
        "stopped_warmup": max(warmups),
    }
    figures = {
        "benchmark": "time_bounds",
        "repeats": args.repeats,
        "parse_s_by_input_worst": {
            name: round(max(run[name] for run in parse_runs), 4) for name in PATHOLOGICAL
        },
        "read_timeout_end_s": [round(t, 3) for t in timeouts],
        "external_gives_up_s": [round(t, 3) for t in externals],
        "stopped_warmup_s": [round(t, 3) for t in warmups],
        "worst_s": {k: round(v, 4) for k, v in worst.items()},
        "goals_s": GOALS_S,
        "met": {k: worst[k] < goal for k, goal in GOALS_S.items()},
    }
    figures["all_met"] = all(figures["met"].values())  # type: ignore[arg-type]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
