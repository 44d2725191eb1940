"""The line "the server takes no video" goes to the log the node passes to the core (its ROS logger), once per
switch to frames: not once per request, again after the server came back (adapt_to_server forgets)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support.configs import default_config
from support.scripted_server import ScriptedServer, media_counts

from cosmos_reasoner_ros.clips import Frame
from cosmos_reasoner_ros.node import core
from cosmos_reasoner_ros.requests import RequestSpec

NS = 1_000_000_000
T0 = 1_700_000_000 * NS


@pytest.fixture
def no_video() -> Iterator[ScriptedServer]:
    with ScriptedServer(mm_limits={"image": 4, "video": 0}) as s:
        yield s


def _fill(built: core.Core) -> None:
    rng = np.random.default_rng(0)
    buf = built.buffers["camera"]
    for i in range(16):  # 4 s at 4 Hz
        stamp = T0 + i * NS // 4
        image = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
        if buf.wants(stamp):
            buf.add(Frame(camera="camera", stamp_ns=stamp, image=image, frame_id="optical"))


def test_the_switch_to_frames_is_logged_once_through_the_node_s_log(
    no_video: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines: list[str] = []
    cfg = default_config(
        server_url=no_video.base_url, media_dir=str(tmp_path), clip_seconds=2.0, max_image_frames=4
    )
    built = core.Core.build(cfg, log=lines.append)
    try:
        _fill(built)
        with caplog.at_level(logging.WARNING):
            results = [built.pipeline.run(RequestSpec(f"r{i}", "next_action")) for i in range(3)]
            assert all(r.success for r in results), [r.error for r in results]
            assert [line for line in lines if "takes no video" in line] == [lines[0]]
            assert len(lines) == 1
            # the server came back (maybe restarted with other limits): asked afresh, logged again once
            built.adapt_to_server(None)
            again = [built.pipeline.run(RequestSpec(f"s{i}", "next_action")) for i in range(2)]
            assert all(r.success for r in again)
        assert len(lines) == 2 and "takes no video" in lines[1]
        assert "up to 4 sampled frames" in lines[0]
        # through the node's log only, not Python's as well
        assert not [r for r in caplog.records if "takes no video" in r.getMessage()]
        sent = [media_counts(body) for body in no_video.requests]
        assert sent == [{"video": 1}, *[{"image": 4}] * 3, {"video": 1}, {"image": 4}, {"image": 4}]
    finally:
        built.close()


def test_without_a_node_log_the_line_goes_to_python_logging(
    no_video: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = default_config(
        server_url=no_video.base_url, media_dir=str(tmp_path), clip_seconds=2.0, max_image_frames=4
    )
    built = core.Core.build(cfg)
    try:
        _fill(built)
        with caplog.at_level(logging.WARNING):
            for i in range(2):
                assert built.pipeline.run(RequestSpec(f"r{i}", "next_action")).success
        assert len([r for r in caplog.records if "takes no video" in r.getMessage()]) == 1
    finally:
        built.close()
