"""node/core: the user's own task schemas compiled at start by the grammar backends of the node's Python (the
robot's ROS environment usually has none: then a note says so, once)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from support import vllm_tier
from support.configs import default_config
from support.processes import free_port
from support.scripted_server import ScriptedServer

from cosmos_reasoner_ros.node import core
from cosmos_reasoner_ros.reasoner import ClientSettings, TaskCatalog

TASK = {"media": "image", "reasoning": False, "answer_kind": "text", "profile": "default"}
# A backreference: vLLM's xgrammar front end refuses it (HTTP 400 for every such request).
BACKREF = {
    "type": "object",
    "properties": {"w": {"type": "string", "pattern": "^(a)\\1$"}},
    "required": ["w"],
}


def _catalog(tmp_path: Path, tasks: dict) -> TaskCatalog:
    user = tmp_path / "tasks.yaml"
    user.write_text(yaml.safe_dump({"tasks": tasks}))
    return TaskCatalog.load(user)


def test_the_shipped_catalog_needs_no_check_here() -> None:
    assert core.user_schema_check(TaskCatalog.load()) == ([], [])


def test_without_a_backend_the_note_says_what_was_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core.importlib.util, "find_spec", lambda name: None)
    changed = copy.deepcopy(TaskCatalog.load().spec("grounding_2d").json_schema)
    assert changed is not None
    changed["maxItems"] = 3
    catalog = _catalog(
        tmp_path, {"grounding_2d": {"json_schema": changed}, "plain": {"template": "x", **TASK}}
    )
    problems, notes = core.user_schema_check(catalog)
    assert problems == [] and len(notes) == 1
    assert notes[0].startswith("structured output: the json_schema of grounding_2d (tasks_file) was checked")
    assert "neither xgrammar nor llguidance" in notes[0]


@pytest.mark.grammar
@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_with_a_backend_a_schema_it_cannot_use_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in a node whose Python has xgrammar (here: the vLLM environment's, 0.2.8)."""
    monkeypatch.setattr(
        core.importlib.util, "find_spec", lambda name: object() if name == "xgrammar" else None
    )
    monkeypatch.setattr(core.sys, "executable", str(vllm_tier.vllm_python()))
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "_ROS_WHEELS_BOOTSTRAP_COMPLETE", "VIRTUAL_ENV"):
        monkeypatch.delenv(name, raising=False)
    catalog = _catalog(tmp_path, {"counting": {"template": "How many?", "json_schema": BACKREF, **TASK}})
    problems, notes = core.user_schema_check(catalog)
    assert notes == [] and len(problems) == 2  # free and no whitespace
    assert problems[0].startswith("tasks_file: task counting: its json_schema refused by vLLM's front end")
    assert "with xgrammar 0.2.8" in problems[0] and "Backreference is not supported" in problems[0]


# ---- the per-request video mode the server's vLLM takes ----


def _video(tmp_path: Path):  # type: ignore[no-untyped-def]
    from cosmos_reasoner_ros.clips import MediaRef

    path = tmp_path / "clip.mp4"
    path.write_bytes(b"\0")
    return MediaRef("video", path.as_uri(), path, "video/mp4", 1, 0.0, 64, 48, fps=4.0)


@pytest.mark.parametrize(
    ("version", "chosen"),
    [
        ("0.19.1", "mm_processor_kwargs"),
        ("0.21.0", "mm_processor_kwargs"),
        ("0.26.0", "media_io_kwargs"),
        ("0.32.0+cpu", "media_io_kwargs"),
        (None, "media_io_kwargs"),
    ],
)
def test_auto_sends_the_mode_the_servers_version_takes(
    tmp_path: Path, version: str | None, chosen: str
) -> None:
    from cosmos_reasoner_ros.reasoner import build_request

    with ScriptedServer() as server:
        server.version = version or ""
        built = core.Core.build(default_config(server_url=server.base_url, media_dir=str(tmp_path / "m")))
        try:
            # Not known yet (no /version): auto, sent as media_io_kwargs, the mode every release takes.
            assert built.pipeline.request_settings.video_kwargs_mode == (chosen if version else "auto")
            if version:
                assert built.notes[-1] == f"video_kwargs_mode auto: {chosen} for the server's vLLM {version}"
            task = built.catalog.render("next_action")
            extra = build_request(task, [_video(tmp_path)], built.pipeline.request_settings).params[
                "extra_body"
            ]
            assert chosen in extra and {"media_io_kwargs", "mm_processor_kwargs"} - {chosen} - set(extra)
        finally:
            built.close()


def test_a_mode_the_servers_version_refuses_stops_the_start_or_is_never_sent(tmp_path: Path) -> None:
    """The H200: vLLM 0.26.0 answered HTTP 400 to mm_processor_kwargs. Asked for explicitly, the node refuses
    at start when the server answers; a server that comes up later makes each video request end as
    invalid_request with the reason, and nothing is sent."""
    from cosmos_reasoner_ros.errors import TaskError
    from cosmos_reasoner_ros.node import ConfigError
    from cosmos_reasoner_ros.reasoner import build_request

    cfg = default_config(video_kwargs_mode="mm_processor_kwargs", media_dir=str(tmp_path / "m"))
    with ScriptedServer() as server:
        server.version = "0.26.0"
        with pytest.raises(
            ConfigError, match=r"video_kwargs_mode mm_processor_kwargs: vLLM 0\.26\.0 samples"
        ):
            core.Core.build(dataclasses.replace(cfg, server_url=server.base_url))
    built = core.Core.build(dataclasses.replace(cfg, server_url=f"http://127.0.0.1:{free_port()}/v1"))
    try:
        assert built.pipeline.request_settings.video_refusal == ""  # not known yet: as asked
        line = built.adapt_to_server("0.32.0+cpu")
        assert line.startswith("video_kwargs_mode mm_processor_kwargs: vLLM 0.32.0+cpu samples")
        assert line.endswith("use auto or media_io_kwargs")
        task = built.catalog.render("next_action")
        with pytest.raises(TaskError, match="HTTP 400 'Failed to apply Qwen3VLProcessor'"):
            build_request(task, [_video(tmp_path)], built.pipeline.request_settings)
        image = built.catalog.render("trajectory", task="t")
        assert build_request(image, [], built.pipeline.request_settings).params  # images are not concerned
        assert (
            built.adapt_to_server("0.21.0")
            == "video_kwargs_mode mm_processor_kwargs: mm_processor_kwargs for the server's vLLM 0.21.0"
        )
        assert built.pipeline.request_settings.video_refusal == ""
    finally:
        built.close()


_SECONDS = st.floats(0.01, 600.0)


@given(
    timeouts=st.tuples(_SECONDS, _SECONDS, st.sampled_from([0.0, 45.0]), st.floats(0.0, 600.0)),
    pace=st.tuples(st.floats(0.0, 100.0), st.floats(1.0, 60.0), st.integers(0, 10)),
    names=st.tuples(st.sampled_from(["", "nvidia/Cosmos-Reason2-2B"]), st.sampled_from(["KEY", "OTHER"])),
    pipeline=st.tuples(_SECONDS, st.booleans(), st.booleans(), st.floats(0.0, 60.0), _SECONDS),
)
def test_the_settings_take_each_parameter_that_sets_them(
    timeouts: tuple[float, float, float, float],
    pace: tuple[float, float, int],
    names: tuple[str, str],
    pipeline: tuple[float, bool, bool, float, float],
) -> None:
    """The client's and the pipeline's settings against the node's parameters: which parameter sets which
    field is written out here; every other field keeps its default."""
    client_fields = {  # parameter -> field of ClientSettings
        "server_url": "base_url",
        "model": "model",
        "api_key_env": "api_key_env",
        "connect_timeout_s": "connect_timeout_s",
        "request_timeout_s": "read_timeout_s",
        "first_token_timeout_s": "first_token_timeout_s",
        "min_tokens_per_s": "min_tokens_per_s",
        "progress_window_s": "progress_window_s",
        "max_retries": "max_retries",
    }
    client_values = ("http://10.0.0.2:8001", *names, timeouts[0], timeouts[1], timeouts[3], *pace)
    client_params = dict(zip(client_fields, client_values, strict=True))
    pipeline_params = dict(zip(_PIPELINE_FIELDS, pipeline, strict=True))
    cfg = default_config(**client_params, request_total_timeout_s=timeouts[2], **pipeline_params)

    expected = {field: client_params[name] for name, field in client_fields.items()}
    expected["total_timeout_s"] = timeouts[2] or None  # 0: no limit
    assert dataclasses.asdict(core._client_settings(cfg)) == dataclasses.asdict(ClientSettings()) | expected
    assert dataclasses.asdict(core._pipeline_settings(cfg)) == pipeline_params


_PIPELINE_FIELDS = ("clip_seconds", "tiled", "stream", "wait_for_server_s", "stale_after_s")
