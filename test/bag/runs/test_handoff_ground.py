"""Where a run's rehearsed handoff put its paths: the run's handoff.* settings and the handoff camera's
CameraInfo in the bag give the ground; without one of them, the reason (then the paths are scored in
pixels)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from support.labelled import points_text, record

from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.runs.handoff_ground import BagCameras, handoff_ground
from cosmos_reasoner_ros.bag.scores import HandoffGround
from cosmos_reasoner_ros.handoff import HandoffSettings

SETTINGS = HandoffSettings(mode="dry_run", camera_height_m=0.5, camera_pitch_deg=20.0)
ANSWER = record("drive_path", 1.0, points_text([(500, 900), (500, 700)]), "points")  # of "camera"


@pytest.fixture(scope="module")
def bags(robot_clip: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ground")
    options = MakeOptions(start_ns=1_700_000_000_000_000_000, rate_hz=2.0, max_long_side=320)
    make_bag([robot_clip], folder / "with_info", options)
    make_bag([robot_clip], folder / "without_info", replace(options, info_topic=""))
    return {"with_info": folder / "with_info", "without_info": folder / "without_info"}


def test_the_ground_is_the_run_s_plane_and_the_bag_s_camera_info(bags: dict[str, Path]) -> None:
    with BagReader(bags["with_info"]) as reader:
        cameras = BagCameras.of(reader, "/camera/image_raw")
        assert cameras.infos == ("/camera/camera_info",)
        found = handoff_ground(SETTINGS, {"robot": cameras})(ANSWER)
        assert isinstance(found, HandoffGround)
        k = found.intrinsics
        assert k.width == 320 and k.fx == pytest.approx(320 / 2 / math.tan(math.radians(30)))
        assert found.plane == SETTINGS.ground_plane() and found.limits == SETTINGS.path_limits()
        # A camera_info_topic the bag does not hold: the camera's own CameraInfo, as the replay gave it.
        elsewhere = replace(SETTINGS, camera_info_topic="/robot/front/camera_info")
        assert isinstance(handoff_ground(elsewhere, {"robot": cameras})(ANSWER), HandoffGround)
        # The answer of a camera the bag's replay did not have, among several: no CameraInfo to take.
        two = BagCameras(reader, ("/camera/image_raw", "/camera/image_raw"), cameras.infos * 2)
        third = replace(ANSWER, trajectories=(replace(ANSWER.trajectories[0], camera="camera3"),))
        assert "camera3" in str(handoff_ground(SETTINGS, {"robot": two})(third))
        # A record of a bag the run did not replay, among several.
        other = replace(ANSWER, bag="elsewhere")
        assert "'elsewhere'" in str(handoff_ground(SETTINGS, {"robot": cameras, "b": two})(other))


def test_without_a_plane_or_camera_info_the_reason(bags: dict[str, Path]) -> None:
    with BagReader(bags["with_info"]) as reader:
        unset = handoff_ground(HandoffSettings(), {"robot": BagCameras.of(reader, "/camera/image_raw")})
        assert "handoff.camera_height_m" in str(unset(ANSWER)) and "> 0 m" in str(unset(ANSWER))
    with BagReader(bags["without_info"]) as reader:
        cameras = BagCameras.of(reader, "/camera/image_raw")
        assert cameras.infos == ("",)
        assert "no CameraInfo for /camera/image_raw" in str(handoff_ground(SETTINGS, {"": cameras})(ANSWER))
