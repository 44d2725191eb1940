"""reasoner/media_form and the frames form of request_builder: vLLM's refusal read from its message, what the
node learns from it (once), and a clip's frames in a request: media first, each after its time where the task
answers in times, then the task's text."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cosmos_reasoner_ros.clips import MediaRef
from cosmos_reasoner_ros.reasoner import MediaForm, MediaRefusal, TaskCatalog, build_request, media_refusal
from cosmos_reasoner_ros.reasoner.request_builder import TIMED_ANSWER_KINDS, RequestSettings

# vLLM's own words (vllm/multimodal/processing/context.py, 0.32; earlier releases' chat_utils and profiling).
VLLM_VIDEO = "At most 0 video(s) may be provided in one prompt."
VLLM_IMAGE = (
    "At most 1 image(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to increase this limit."
)
OLD_VLLM_VIDEO = "At most 0 video(s) may be provided in one request."
OLDER_VLLM_VIDEO = (
    "You set or defaulted to '{\"video\": 0}' in `--limit-mm-per-prompt`, but passed 1 video items in the "
    "same prompt."
)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (VLLM_VIDEO, MediaRefusal("video", 0)),
        (f"1 validation error: {VLLM_VIDEO} (param video)", MediaRefusal("video", 0)),
        (OLD_VLLM_VIDEO, MediaRefusal("video", 0)),
        (OLDER_VLLM_VIDEO, MediaRefusal("video")),
        (VLLM_IMAGE, MediaRefusal("image", 1)),
        ("AT MOST 8 IMAGES may be provided", MediaRefusal("image", 8)),
        ("Video input is not supported by this model", MediaRefusal("video")),
        ("this server does not support video", MediaRefusal("video")),
        ("The decoder prompt (length 9000) is longer than the maximum model length of 8192", None),
        ("Grammar error: the json schema is invalid", None),
        ("video_url: file:///tmp/x.mp4 is not under --allowed-local-media-path", None),
        ("Cannot load video: unsupported codec", None),  # a bad file, not a server without video
        ("Videos are not allowed on this endpoint", MediaRefusal("video")),
        ("", None),
    ],
)
def test_refusals_are_read_from_the_server_s_message(message: str, expected: MediaRefusal | None) -> None:
    assert media_refusal(message) == expected


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
@example("at most 3 cats may be provided")
@example("limit-mm-per-prompt")
def test_a_message_naming_neither_videos_nor_images_is_no_refusal(message: str) -> None:
    if re.search("video|image", message, re.IGNORECASE):
        return
    assert media_refusal(message) is None


@given(
    limit=st.integers(0, 10_000),
    modality=st.sampled_from(["video", "image"]),
    prefix=st.text(max_size=40),
    suffix=st.text(max_size=40),
)
def test_vllm_s_sentence_is_read_whatever_surrounds_it(
    limit: int, modality: str, prefix: str, suffix: str
) -> None:
    message = f"{prefix} At most {limit} {modality}(s) may be provided in one prompt.{suffix}"
    found = media_refusal(message)
    assert found is not None and found.modality == modality
    # The first "at most" sentence wins; the prefix may hold one of its own.
    if not re.search(r"at\s+most\s+\d", prefix, re.IGNORECASE):
        assert found.limit == limit


def test_auto_learns_once_and_forgets_on_a_server_restart() -> None:
    form = MediaForm("auto", 8)
    assert not form.frames and form.image_limit == 8
    line = form.learn(MediaRefusal("video", 0))
    assert "takes no video" in line and "8 sampled frames" in line
    assert form.frames
    assert form.learn(MediaRefusal("video", 0)) == ""  # logged once
    assert "at most 1 image" in form.learn(MediaRefusal("image", 1))
    assert form.image_limit == 1
    assert form.learn(MediaRefusal("image", 1)) == ""
    assert form.learn(MediaRefusal("image", 4)) == ""  # never raised by a refusal
    form.forget()
    assert not form.frames and form.image_limit == 8


def test_video_and_frames_modes_do_not_change() -> None:
    video, frames = MediaForm("video"), MediaForm("frames", 3)
    assert video.learn(MediaRefusal("video", 0)) == "" and not video.frames
    assert frames.frames and frames.image_limit == 3
    assert frames.learn(MediaRefusal("image", 9)) == "" and frames.image_limit == 3


def test_learning_is_thread_safe_and_logged_once() -> None:
    form = MediaForm()
    lines: list[str] = []
    threads = [
        threading.Thread(target=lambda: lines.append(form.learn(MediaRefusal("video", 0)))) for _ in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(bool(line) for line in lines) == 1


@pytest.mark.parametrize(("form", "images"), [("sometimes", 8), ("auto", 0)])
def test_bad_settings_are_refused(form: str, images: int) -> None:
    with pytest.raises(ValueError, match=r"media_form|max_image_frames"):
        MediaForm(form, images)


def _frames(times: list[float], camera: str = "front") -> list[MediaRef]:
    return [
        MediaRef(
            "image",
            f"file:///m/{camera}{i}.jpg",
            Path(f"/m/{camera}{i}.jpg"),
            "image/jpeg",
            9,
            0.0,
            64,
            48,
            camera,
        )
        for i in range(len(times))
    ]


@pytest.mark.parametrize("name", TaskCatalog.load().names())
def test_every_task_as_frames_media_first_times_where_it_answers_in_times(name: str) -> None:
    catalog = TaskCatalog.load()
    task = catalog.render(name, **dict.fromkeys(catalog.spec(name).placeholders, "x"))
    times = [0.0, 0.5, 1.25, 3.0]
    request = build_request(task, _frames(times), RequestSettings(), frame_times_s=times)
    content = request.messages[-1]["content"]
    assert content[-1]["type"] == "text" and content[-1]["text"].startswith(task.prompt)
    parts = content[:-1]
    images = [p for p in parts if p["type"] == "image_url"]
    assert [p["image_url"]["url"] for p in images] == [f"file:///m/front{i}.jpg" for i in range(4)]
    assert "media_io_kwargs" not in request.params["extra_body"]  # no video: no video sampling
    if task.answer_kind not in TIMED_ANSWER_KINDS:
        assert parts == images
        return
    labels = parts[0::2]
    assert parts[1::2] == images
    assert [p["text"] for p in labels] == [f"Frame at {t:.2f} s:" for t in times]


def test_several_cameras_name_the_camera_of_each_frame() -> None:
    task = TaskCatalog.load().render("temporal_localization")
    media = _frames([0.0, 1.0], "left") + _frames([0.25, 1.25], "right")
    times = [0.0, 1.0, 0.25, 1.25]
    content = build_request(task, media, RequestSettings(), frame_times_s=times).messages[-1]["content"]
    assert [p["text"] for p in content[:-1] if p["type"] == "text"] == [
        "left frame at 0.00 s:",
        "left frame at 1.00 s:",
        "right frame at 0.25 s:",
        "right frame at 1.25 s:",
    ]


def test_frame_times_must_match_the_media() -> None:
    task = TaskCatalog.load().render("temporal_localization")
    with pytest.raises(Exception, match="frame times"):
        build_request(task, _frames([0.0, 1.0]), RequestSettings(), frame_times_s=[0.0])
