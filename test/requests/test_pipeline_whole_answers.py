"""Whole answers only, end to end without ROS: a structured answer cut anywhere, streamed or not, with the
schema sent or not, and whatever finish reason the server gives, ends as an error outcome with the raw text
kept and nothing parsed; only the whole answer is a success (issue 37's held-out probe, generated).

The oracle is where the JSON value ends in the text the scripted server sends: a success must have received at
least that much. It does not ask the parser.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.clips.clip_buffer import ClipBuffer
from cosmos_reasoner_ros.clips.clip_writer import ClipWriter
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.media_store import MediaStore
from cosmos_reasoner_ros.clips.multi_camera import MultiCameraBuffer
from cosmos_reasoner_ros.errors import ANSWER_ERROR_KINDS
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.request_builder import RequestSettings
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog
from cosmos_reasoner_ros.requests.outcome import Outcome, RequestSpec
from cosmos_reasoner_ros.requests.pipeline import Pipeline, PipelineSettings
from cosmos_reasoner_ros.schemas.schema_samples import serialize, valid_values

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
CATALOG = TaskCatalog.load()
# The structured tasks whose media is an image: one frame per request keeps each example cheap; the video
# tasks' answers take the same parser path (test/reasoner/test_completeness.py cuts every task).
TASKS = sorted(
    n for n in CATALOG.names() if CATALOG.spec(n).json_schema is not None and CATALOG.spec(n).media == "image"
)
PREFIX = "<think>\nThe floor ahead is clear.\n</think>\n\n```json\n"


@pytest.fixture(scope="module")
def buffer(robot_clip: Path) -> MultiCameraBuffer:
    with av.open(str(robot_clip)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)][:4]
    buf = ClipBuffer("front", 4.0, 30.0, 64 * 1024 * 1024, 0)
    for i, image in enumerate(frames):
        buf.add(Frame("front", T0 + i * NS // 4, np.ascontiguousarray(image), frame_id="front_optical"))
    return MultiCameraBuffer([buf])


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


def ask(
    buffer: MultiCameraBuffer,
    server: ScriptedServer,
    media: Path,
    task: str,
    reply: ScriptedReply,
    stream: bool,
    structured: bool,
) -> Outcome:
    client = ReasonerClient(
        ClientSettings(base_url=server.base_url, max_retries=0, read_timeout_s=10.0, connect_timeout_s=1.0)
    )
    pipeline = Pipeline(
        buffer,
        ClipWriter(MediaStore(media)),
        CATALOG,
        client,
        RequestSettings(structured_output=structured),
        PipelineSettings(clip_seconds=2.0, stream=stream),
    )
    server.push(reply)
    try:
        return pipeline.run(RequestSpec(f"w-{task}", task, instruction="go to the door"))
    finally:
        client.close()


def answer_of(task: str, seed: int) -> tuple[str, int]:
    """A valid answer of the task as a model writes it, and where its JSON value ends in that text."""
    schema = CATALOG.spec(task).json_schema
    assert schema is not None
    body = serialize(valid_values(schema, random.Random(seed), 1)[0], "spaced")
    return f"{PREFIX}{body}\n```", len(PREFIX) + len(body)


def check(out: Outcome, sent: str, value_end: int) -> None:
    if out.success:
        assert len(sent) >= value_end, f"a success from {len(sent)} of the value's {value_end} characters"
        assert out.parsed is not None
    else:
        # Any error will do (an empty stream without a finish reason is a grammar failure, say); an answer
        # error keeps the text that came.
        assert out.parsed is None and out.error_kind, out
        if out.error_kind in ANSWER_ERROR_KINDS:
            assert out.answer == sent, (out.answer, sent)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "unstreamed"])
@pytest.mark.parametrize("structured", [True, False], ids=["schema", "no-schema"])
@pytest.mark.parametrize("task", TASKS)
def test_a_third_two_thirds_and_all_but_the_last_bracket(
    buffer: MultiCameraBuffer,
    server: ScriptedServer,
    tmp_path: Path,
    task: str,
    stream: bool,
    structured: bool,
) -> None:
    text, end = answer_of(task, seed=7)
    for cut in (len(PREFIX) + (end - len(PREFIX)) // 3, len(PREFIX) + 2 * (end - len(PREFIX)) // 3, end - 1):
        sent = text[:cut]
        out = ask(buffer, server, tmp_path, task, ScriptedReply(text=sent), stream, structured)
        assert not out.success and out.error_kind == "incomplete", (cut, out.error_kind, out.error)
        assert out.answer == sent and "never closed" in out.error
    whole = ask(buffer, server, tmp_path, task, ScriptedReply(text=text), stream, structured)
    assert whole.success, (whole.error_kind, whole.error)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    task=st.sampled_from(TASKS),
    seed=st.integers(0, 2**16),
    fraction=st.floats(0.0, 1.0),
    finish=st.sampled_from(["stop", None, "length"]),
    stream=st.booleans(),
    structured=st.booleans(),
)
@example(task="drive_path", seed=1, fraction=0.6, finish="stop", stream=True, structured=False)
def test_generated_cuts_never_succeed_with_part_of_the_value(
    buffer: MultiCameraBuffer,
    server: ScriptedServer,
    tmp_path_factory: pytest.TempPathFactory,
    task: str,
    seed: int,
    fraction: float,
    finish: str | None,
    stream: bool,
    structured: bool,
) -> None:
    text, end = answer_of(task, seed)
    sent = text[: round(fraction * len(text))]
    reply = ScriptedReply(text=sent, finish_reason=finish)  # type: ignore[arg-type]
    out = ask(buffer, server, tmp_path_factory.mktemp("media"), task, reply, stream, structured)
    check(out, sent, end)
