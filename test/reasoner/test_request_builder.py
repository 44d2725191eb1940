"""Request building: message layout, reasoning suffixes, where sampling and priority go, video kwargs at the
clip's own frame rate, and clamps."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.scripted_server import ScriptedServer

from cosmos_reasoner_ros.clips.media_store import MediaRef
from cosmos_reasoner_ros.errors import TaskError
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.request_builder import (
    REASONING_SUFFIXES,
    RequestSettings,
    build_request,
    video_kwargs,
)
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog

THINK_SUFFIX = (
    "Answer the question using the following format:\n\n<think>\nYour reasoning.\n</think>\n\n"
    "Write your final answer immediately after the </think> tag."
)


def _ref(kind: str, name: str, fps: float = 0.0) -> MediaRef:
    path = Path("/media") / name
    mime = "video/mp4" if kind == "video" else "image/jpeg"
    return MediaRef(
        kind=kind,
        url=path.as_uri(),
        path=path,
        mime=mime,
        size_bytes=10,
        encode_s=0.0,
        width=640,
        height=480,
        fps=fps,
    )


@pytest.fixture(scope="module")
def catalog() -> TaskCatalog:
    return TaskCatalog.load()


def test_layout_system_media_first_then_text_with_suffix(catalog: TaskCatalog) -> None:
    media = [_ref("video", "a.mp4"), _ref("video", "b.mp4"), _ref("image", "c.jpg")]
    request = build_request(catalog.render("next_action"), media, RequestSettings())
    assert request.messages[0] == {"role": "system", "content": "You are a helpful assistant."}
    user = request.messages[1]
    assert user["role"] == "user" and len(request.messages) == 2
    parts = user["content"]
    assert [p["type"] for p in parts] == ["video_url", "video_url", "image_url", "text"]
    assert parts[0]["video_url"]["url"] == "file:///media/a.mp4"
    assert parts[2]["image_url"]["url"] == "file:///media/c.jpg"
    assert parts[3]["text"] == "What can be the next immediate action?\n\n" + THINK_SUFFIX


def test_answer_tag_suffix_and_no_suffix_without_reasoning(catalog: TaskCatalog) -> None:
    tagged = build_request(catalog.render("plausibility"), [_ref("video", "v.mp4")], RequestSettings())
    text = tagged.messages[1]["content"][-1]["text"]
    assert text.endswith(REASONING_SUFFIXES["answer_tag"]) and "<answer>" in text
    plain = build_request(catalog.render("caption"), [_ref("video", "v.mp4")], RequestSettings())
    assert plain.messages[1]["content"][-1]["text"] == "Describe the video in detail."


def test_sampling_profiles_and_extra_body(catalog: TaskCatalog) -> None:
    reasoning = build_request(catalog.render("next_action"), [], RequestSettings()).params
    assert {k: reasoning[k] for k in ("temperature", "top_p", "presence_penalty", "max_tokens")} == {
        "temperature": 0.6,
        "top_p": 0.95,
        "presence_penalty": 0.0,
        "max_tokens": 4096,
    }
    assert reasoning["extra_body"] == {"top_k": 20, "repetition_penalty": 1.0, "priority": 0}
    assert "top_k" not in reasoning and "repetition_penalty" not in reasoning  # the SDK has no such arguments
    plain = build_request(catalog.render("caption"), [], RequestSettings(max_tokens=99)).params
    assert (plain["temperature"], plain["top_p"], plain["presence_penalty"]) == (0.7, 0.8, 1.5)
    assert plain["max_tokens"] == 99
    assert not {"model", "messages", "stream"} & set(plain)


def test_structured_output_only_when_enabled_and_defined(catalog: TaskCatalog) -> None:
    task = catalog.render("grounding_2d", object="the cup")
    off = build_request(task, [_ref("image", "i.jpg")], RequestSettings())
    assert "structured_outputs" not in off.params["extra_body"]
    on = build_request(task, [_ref("image", "i.jpg")], RequestSettings(structured_output=True))
    assert on.params["extra_body"]["structured_outputs"] == {"json": task.json_schema}
    no_schema = build_request(catalog.render("caption"), [], RequestSettings(structured_output=True))
    assert "structured_outputs" not in no_schema.params["extra_body"]


def test_requests_that_do_not_reason_turn_the_templates_thinking_off(catalog: TaskCatalog) -> None:
    """Behind a reasoning parser, vLLM applies a grammar only once reasoning is over: a request that does not
    reason says so through the chat template's switch (the prompt then ends in an empty think block)."""
    off = {"enable_thinking": False}
    for name in catalog.names():
        values = dict.fromkeys(catalog.spec(name).placeholders, "x")
        task = catalog.render(name, **values)
        for structured in (False, True):
            extra = build_request(task, [], RequestSettings(structured_output=structured)).params[
                "extra_body"
            ]
            assert extra.get("chat_template_kwargs") == (None if task.reasoning else off), name
            assert ("structured_outputs" in extra) == (structured and task.json_schema is not None), name
        fast = build_request(catalog.render_without_reasoning(name, **values), [], RequestSettings())
        assert fast.params["extra_body"]["chat_template_kwargs"] == off, name  # reasoning turned off


def test_video_kwargs_modes_and_clamps() -> None:
    assert video_kwargs(RequestSettings(fps=4)) == {
        "media_io_kwargs": {"video": {"num_frames": 256, "fps": 4}}
    }
    assert video_kwargs(RequestSettings(fps=60, num_frames=10_000)) == {
        "media_io_kwargs": {"video": {"num_frames": 256, "fps": 8.0}}
    }
    assert video_kwargs(RequestSettings(num_frames=16, max_frames=32)) == {
        "media_io_kwargs": {"video": {"num_frames": 16}}
    }
    assert video_kwargs(RequestSettings(video_kwargs_mode="mm_processor_kwargs", fps=30, max_fps=2)) == {
        "mm_processor_kwargs": {"fps": 2, "do_sample_frames": True}
    }
    assert video_kwargs(
        RequestSettings(video_kwargs_mode="mm_processor_kwargs", num_frames=999, max_frames=64)
    ) == {"mm_processor_kwargs": {"num_frames": 64, "do_sample_frames": True}}
    assert video_kwargs(RequestSettings(video_kwargs_mode="none", fps=4)) == {}


def test_video_kwargs_only_with_video(catalog: TaskCatalog) -> None:
    settings = RequestSettings(fps=4)
    image = build_request(catalog.render("trajectory", task="t"), [_ref("image", "i.jpg")], settings)
    assert set(image.params["extra_body"]) == {"top_k", "repetition_penalty", "priority"}
    video = build_request(catalog.render("next_action"), [_ref("video", "v.mp4")], settings)
    assert video.params["extra_body"]["media_io_kwargs"] == {"video": {"num_frames": 256, "fps": 4}}


def test_the_request_asks_for_the_clip_files_own_frame_rate(catalog: TaskCatalog) -> None:
    """Before: the request carried sample_fps (4) while a slower camera's file ran at its measured 2.5 fps, so
    the server's time line and the file's disagreed. Now the file's own rate is asked for."""
    task = catalog.render("next_action")
    slow = build_request(task, [_ref("video", "v.mp4", fps=2.5)], RequestSettings(fps=4))
    assert slow.params["extra_body"]["media_io_kwargs"] == {"video": {"num_frames": 256, "fps": 2.5}}
    plugin = RequestSettings(fps=4, video_kwargs_mode="mm_processor_kwargs")
    older = build_request(task, [_ref("video", "v.mp4", fps=2.5)], plugin)
    assert older.params["extra_body"]["mm_processor_kwargs"] == {"fps": 2.5, "do_sample_frames": True}
    # Several cameras: one rate for the request, the fastest file's (every frame of every file is kept).
    both = build_request(task, [_ref("video", "a.mp4", fps=2.0), _ref("video", "b.mp4", fps=3.0)], plugin)
    assert both.params["extra_body"]["mm_processor_kwargs"]["fps"] == 3.0
    # Still clamped (CVE-2026-105758), and settings.fps only stands in for a file that states no rate.
    fast = build_request(task, [_ref("video", "v.mp4", fps=30.0)], RequestSettings(fps=4))
    assert fast.params["extra_body"]["media_io_kwargs"]["video"]["fps"] == 8.0
    unknown = build_request(task, [_ref("video", "v.mp4")], RequestSettings(fps=4))
    assert unknown.params["extra_body"]["media_io_kwargs"]["video"]["fps"] == 4
    assert (
        "fps"
        not in build_request(task, [_ref("video", "v.mp4")], RequestSettings()).params["extra_body"][
            "media_io_kwargs"
        ]["video"]
    )


def test_the_tasks_priority_is_sent_with_every_request(catalog: TaskCatalog) -> None:
    caption = build_request(catalog.render("caption"), [_ref("video", "v.mp4")], RequestSettings())
    assert caption.params["extra_body"]["priority"] == catalog.spec("caption").priority > 0
    with ScriptedServer() as server, ReasonerClient(ClientSettings(base_url=server.base_url)) as client:
        client.complete(caption, stream=False)
    assert server.requests[0]["priority"] == catalog.spec("caption").priority  # a top-level field for vLLM


@pytest.mark.parametrize(
    "kwargs",
    [
        {"video_kwargs_mode": "both"},
        {"fps": 0},
        {"fps": float("nan")},
        {"max_fps": 0},
        {"max_frames": 0},
        {"num_frames": 0},
        {"max_tokens": 0},
    ],
)
def test_invalid_settings(kwargs: dict) -> None:
    with pytest.raises(TaskError):
        RequestSettings(**kwargs)


def test_unknown_media_kind(catalog: TaskCatalog) -> None:
    with pytest.raises(TaskError, match="video or image"):
        build_request(catalog.render("next_action"), [_ref("audio", "x.wav")], RequestSettings())


def test_custom_system_prompt_and_none(catalog: TaskCatalog) -> None:
    custom = build_request(catalog.render("next_action"), [], RequestSettings(system_prompt="Be brief."))
    assert custom.messages[0] == {"role": "system", "content": "Be brief."}
    bare = build_request(catalog.render("next_action"), [], RequestSettings(system_prompt=""))
    assert [m["role"] for m in bare.messages] == ["user"]


def test_the_server_receives_extra_body_at_the_top_level(catalog: TaskCatalog) -> None:
    """What vLLM reads: extra_body keys merged into the JSON body, next to the OpenAI parameters."""
    task = catalog.render("timestamp_query", event="the gripper closes")
    request = build_request(task, [_ref("video", "v.mp4")], RequestSettings(fps=2, structured_output=True))
    with ScriptedServer() as server, ReasonerClient(ClientSettings(base_url=server.base_url)) as client:
        client.complete(request, stream=False)
    body = server.requests[0]
    assert body["model"] == "scripted"
    assert body["top_k"] == 20 and body["repetition_penalty"] == 1.0
    assert body["media_io_kwargs"] == {"video": {"num_frames": 256, "fps": 2}}
    assert body["structured_outputs"] == {"json": task.json_schema}
    assert (
        body["max_tokens"] == 512 and body["temperature"] == 0.7
    )  # the task's override, the default profile
    assert body["messages"] == request.messages
    assert "extra_body" not in body


def test_media_uuids_name_each_media_item(catalog: TaskCatalog) -> None:
    """vLLM's multimodal uuid: several questions about one clip name the same media, so the server's processor
    and prefix caches can serve the later ones; without uuids the parts are as before."""
    media = [_ref("video", "a.mp4"), _ref("image", "b.jpg")]
    task = catalog.render("next_action")
    request = build_request(task, media, RequestSettings(), media_uuids=["clip-1/video/a", "clip-1/image/b"])
    parts = request.messages[-1]["content"]
    assert parts[0] == {
        "type": "video_url",
        "video_url": {"url": "file:///media/a.mp4"},
        "uuid": "clip-1/video/a",
    }
    assert parts[1]["uuid"] == "clip-1/image/b" and "uuid" not in parts[2]
    plain = build_request(task, media, RequestSettings()).messages[-1]["content"]
    assert all("uuid" not in p for p in plain)
    with pytest.raises(TaskError, match="1 media uuids for 2 media items"):
        build_request(task, media, RequestSettings(), media_uuids=["only-one"])
    with ScriptedServer() as server, ReasonerClient(ClientSettings(base_url=server.base_url)) as client:
        client.complete(request, stream=False)
    assert server.requests[0]["messages"][-1]["content"][0]["uuid"] == "clip-1/video/a"  # reaches the server
