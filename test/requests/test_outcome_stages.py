"""A request's latency budget (Timings.stages, Outcome.stages): generated marks, present or absent in every
combination, equal, or out of clock order; and the marks a real pipeline run sets."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.pipelines import make_pipeline
from support.processes import free_port
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.clips.clip_buffer import ClipBuffer
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.multi_camera import MultiCameraBuffer
from cosmos_reasoner_ros.requests.handoff_decision import HandoffDecision
from cosmos_reasoner_ros.requests.outcome import LATENCY_STAGES, Outcome, RequestSpec, Timings

NAMES = [name for name, _ in LATENCY_STAGES]
MARKS = [mark for _, mark in LATENCY_STAGES]
# A few values, so that equal marks are common; any order of them, so that marks go back in time too.
MARK_VALUES = st.sampled_from([100.0, 100.25, 100.5, 101.0, 103.75, 99.5]) | st.floats(90.0, 200.0)


@st.composite
def timings(draw: st.DrawFn, ordered: bool = False) -> Timings:
    trigger = draw(MARK_VALUES)
    marks = {m: draw(st.none() | MARK_VALUES) for m in MARKS}
    if ordered:  # the clock's order: each present mark at or after the trigger and the marks before it
        present = sorted(v for v in marks.values() if v is not None)
        shift = max(0.0, trigger - present[0]) if present else 0.0
        values = iter(v + shift for v in present)
        marks = {m: None if v is None else next(values) for m, v in marks.items()}
    return Timings(trigger=trigger, started=trigger, **marks)


def oracle(t: Timings) -> list[tuple[str, float]]:
    """Each present mark minus the previous present one (the trigger first), for marks in clock order."""
    out, previous = [], t.trigger
    for name, mark in LATENCY_STAGES:
        at = getattr(t, mark)
        if at is not None:
            out.append((name, at - previous))
            previous = at
    return out


@given(timings())
@example(Timings(trigger=100.0, started=100.0))  # nothing reached: no stage
@example(Timings(trigger=100.0, started=100.0, clip_ready=100.0, encoded=100.0, published=100.0))
@example(Timings(trigger=100.0, started=100.0, clip_ready=99.0, encoded=101.0, published=100.5))
@settings(max_examples=400, deadline=None)
def test_stages_are_non_negative_in_order_and_add_up(t: Timings) -> None:
    stages = t.stages()
    names = [name for name, _ in stages]
    reached = [name for name, mark in LATENCY_STAGES if getattr(t, mark) is not None]
    assert names == reached  # the documented order, a stage exactly where its end mark was reached
    assert all(seconds >= 0 for _, seconds in stages)
    latest = max([t.trigger, *(getattr(t, m) for m in MARKS if getattr(t, m) is not None)])
    assert sum(seconds for _, seconds in stages) == pytest.approx(latest - t.trigger, abs=1e-9)


@given(timings(ordered=True))
@example(Timings(trigger=1.0, started=1.0, request_sent=2.0, response_received=4.0, published=4.5))
@settings(max_examples=400, deadline=None)
def test_stages_in_clock_order_are_the_differences_of_consecutive_marks(t: Timings) -> None:
    for (name, seconds), (want_name, want) in zip(t.stages(), oracle(t), strict=True):
        assert name == want_name and seconds == pytest.approx(want, abs=1e-9)
    if t.published is not None and all(
        getattr(t, m) is None for m in MARKS[MARKS.index("published") + 1 :]
    ):  # published is the last mark: the stages are the whole time from trigger to published
        assert sum(s for _, s in t.stages()) == pytest.approx(t.published - t.trigger, abs=1e-9)


def test_publication_and_handoff_add_their_marks() -> None:
    t = Timings(trigger=10.0, started=10.0, clip_ready=10.1, encoded=10.2, request_sent=10.2)
    outcome = Outcome("r", "next_action", "", False, timings=t)
    assert [n for n, _ in outcome.stages] == ["clip_ready", "encoding", "request_sent"]
    assert [s for _, s in outcome.stages] == pytest.approx([0.1, 0.1, 0.0])
    published = outcome.published(5, at=11.0)
    assert [n for n, _ in published.stages][-1] == "published"
    assert published.stages[-1][1] == pytest.approx(0.8)
    decision = HandoffDecision("r", "r", "next_action", "refused", "no path", decided_ns=5)
    handed = published.with_handoff(decision, at=11.5)
    assert handed.handoff == decision and handed.stages[-1] == ("handoff", pytest.approx(0.5))
    assert Outcome("r", "next_action", "", False).published(5).stages == ()  # no timings, no stages


# -- the marks a real run sets -------------------------------------------------------------------------------

NS = 1_000_000_000
T0 = 1_700_000_000 * NS


@pytest.fixture(scope="module")
def buffer(robot_clip: Path) -> MultiCameraBuffer:
    with av.open(str(robot_clip)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)][:8]
    buf = ClipBuffer("front", 4.0, 30.0, 64 * 1024 * 1024, 0)
    for i, image in enumerate(frames):
        buf.add(Frame("front", T0 + i * NS // 4, np.ascontiguousarray(image), frame_id="front_optical"))
    return MultiCameraBuffer([buf])


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


def test_a_pipeline_success_has_every_request_stage(
    buffer: MultiCameraBuffer, server: ScriptedServer, tmp_path: Path
) -> None:
    server.push(ScriptedReply(text="<think>\nA cup.\n</think>\n\nPlace the cup.", chunk_delay_s=0.01))
    trigger = time.monotonic()
    out = make_pipeline(buffer, tmp_path, server.base_url).run(
        RequestSpec("r1", "next_action", trigger_time=trigger)
    )
    assert out.success, out.error
    names = [n for n, _ in out.stages]
    assert names == ["clip_ready", "encoding", "request_sent", "first_token", "last_token", "parsing"]
    assert all(s >= 0 for _, s in out.stages)
    assert dict(out.stages)["encoding"] > 0  # an MP4 was written
    assert dict(out.stages)["last_token"] >= 0.02  # a few words 10 ms apart
    assert out.timings is not None and out.timings.parsed is not None
    assert sum(s for _, s in out.stages) == pytest.approx(out.timings.parsed - trigger, abs=1e-9)
    published = out.published(out.clip_end_ns)
    assert [n for n, _ in published.stages][-1] == "published"
    assert published.timings is not None and published.timings.published is not None
    total = published.timings.published - trigger
    assert sum(s for _, s in published.stages) == pytest.approx(total, abs=1e-9)


def test_a_request_that_failed_before_sending_has_no_later_stage(
    buffer: MultiCameraBuffer, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    out = make_pipeline(buffer, tmp_path, url, wait_for_server_s=0.3).run(
        RequestSpec("r1", "next_action", trigger_time=time.monotonic())
    )
    assert out.error_kind == "server_unavailable", out.error
    assert [n for n, _ in out.stages] == ["clip_ready", "encoding"]
    published = out.published(0)
    assert [n for n, _ in published.stages] == ["clip_ready", "encoding", "published"]
    assert dict(published.stages)["published"] >= 0.3  # the failed wait for the server lands in it
