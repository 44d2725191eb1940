"""bag_make: real clips and image folders to bags; stamps, rates, CameraInfo, depth; bad input exits 2."""

from __future__ import annotations

import math
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from support.bags import read_topics

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag, resample, synthetic_depth
from cosmos_reasoner_ros.clips.image_conversion import message_to_array

OLD_START = 1_700_000_000_000_000_000  # bags recorded in 2023: replays run on their clock


def read_all(bag: Path) -> dict[str, list[tuple[int, object]]]:
    return read_topics(bag)


def stamp_ns(msg: object) -> int:
    s = msg.header.stamp  # type: ignore[attr-defined]
    return s.sec * 1_000_000_000 + s.nanosec


def first_frame(video: Path) -> np.ndarray:
    with av.open(str(video)) as c:
        return next(c.decode(video=0)).to_ndarray(format="rgb24")


def test_robot_clip_at_10_hz_rgb8_with_info_and_depth(robot_clip: Path, tmp_path: Path) -> None:
    bag = tmp_path / "robot"
    made = make_bag(
        [robot_clip],
        bag,
        MakeOptions(start_ns=OLD_START, rate_hz=10.0, depth="plane", depth_m=1.25, fov_deg=90.0),
    )
    # The clip is 26 frames at 4 fps (6.5 s): 10 Hz over 6.5 s is 65 frames.
    assert made.frames == 65 and (made.width, made.height) == (644, 476)
    assert made.duration_s == pytest.approx(6.4)
    topics = read_all(bag)
    assert sorted(topics) == ["/camera/camera_info", "/camera/depth/image_raw", "/camera/image_raw"]
    images = topics["/camera/image_raw"]
    assert len(images) == 65
    for k, (t, msg) in enumerate(images):
        assert t == stamp_ns(msg) == 1_700_000_000_000_000_000 + k * 100_000_000
        assert msg.encoding == "rgb8" and msg.header.frame_id == "camera_optical_frame"  # type: ignore[attr-defined]
    # Frame 0 is the clip's first frame, pixel for pixel; frames 0-2 (0.0-0.2 s) hold it, frame 3 (0.3 s)
    # is the next.
    first = message_to_array(images[0][1])
    assert np.array_equal(first, first_frame(robot_clip))
    assert np.array_equal(message_to_array(images[2][1]), first)
    assert not np.array_equal(message_to_array(images[3][1]), first)
    info = topics["/camera/camera_info"]
    assert [stamp_ns(m) for _, m in info] == [stamp_ns(m) for _, m in images]
    k = info[0][1].k  # type: ignore[attr-defined]
    assert k[0] == pytest.approx(644 / 2 / math.tan(math.radians(45)))  # fx for a 90 degree horizontal fov
    assert k[2] == pytest.approx(643 / 2) and k[8] == 1.0
    depth = message_to_array(topics["/camera/depth/image_raw"][5][1])
    assert depth.dtype == np.uint16 and depth.shape == (476, 644) and np.all(depth == 1250)


def test_shared_clip_as_jpeg_in_sqlite3_keeps_own_frames(shared_media: Path, tmp_path: Path) -> None:
    clip = shared_media / "physical_plausibility.mp4"
    with av.open(str(clip)) as c:
        n_source = sum(1 for _ in c.decode(video=0))
    bag = tmp_path / "jpeg"
    made = make_bag(
        [clip],
        bag,
        MakeOptions(
            encoding="jpeg", storage="sqlite3", depth="gradient", depth_encoding="32FC1", info_topic=""
        ),
    )
    assert made.frames == n_source
    assert any(p.suffix == ".db3" for p in bag.iterdir())
    topics = read_all(bag)
    assert sorted(topics) == ["/camera/depth/image_raw", "/camera/image_raw/compressed"]
    msgs = topics["/camera/image_raw/compressed"]
    assert all(m.format == "jpeg" for _, m in msgs)  # type: ignore[attr-defined]
    decoded = message_to_array(msgs[0][1])
    assert decoded.shape == (made.height, made.width, 3)
    # JPEG at quality 90 stays close to the source frame.
    assert np.abs(decoded.astype(int) - first_frame(clip).astype(int)).mean() < 4.0
    stamps = [t for t, _ in msgs]
    assert stamps == sorted(set(stamps)) and [stamp_ns(m) for _, m in msgs] == stamps
    depth = message_to_array(topics["/camera/depth/image_raw"][0][1])
    assert depth.dtype == np.float32
    assert depth[0, 0] == pytest.approx(3.0) and depth[-1, 0] == pytest.approx(0.75)


def test_image_folder_and_two_sources_follow_each_other(
    robot_clip: Path, shared_media: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "frames"
    folder.mkdir()
    src = cv2.imread(str(shared_media / "robot_153.jpg"))
    for i in range(5):
        cv2.imwrite(str(folder / f"{i:03d}.png"), np.roll(src, i * 10, axis=1))
    bag = tmp_path / "folder"
    made = make_bag(
        [folder, robot_clip],
        bag,
        MakeOptions(start_ns=OLD_START, rate_hz=5.0, image_fps=5.0, max_long_side=320),
    )
    # 5 images at 5 fps (1 s) then the 6.5 s clip, all at 5 Hz and at the first source's size.
    assert made.frames == 5 + 33
    assert max(made.width, made.height) == 320
    images = read_all(bag)["/camera/image_raw"]
    gaps = np.diff([t for t, _ in images])
    assert np.all(gaps == 200_000_000)
    assert all(message_to_array(m).shape == (made.height, made.width, 3) for _, m in images)


def test_resample_holds_the_newest_frame() -> None:
    frames = [(t, np.full((2, 2, 3), i, np.uint8)) for i, t in enumerate([0.0, 0.25, 0.5, 0.75])]
    out = list(resample(iter(frames), 10.0, 0.25))
    assert [round(t, 3) for t, _ in out] == [round(k / 10, 3) for k in range(10)]
    assert [int(f[0, 0, 0]) for _, f in out] == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]
    assert len(list(resample(iter(frames), 0.0, 0.25))) == 4


def test_synthetic_depth_units() -> None:
    assert synthetic_depth(4, 3, "plane", "16UC1", 2.0).tolist() == [[2000] * 4] * 3
    grad = synthetic_depth(4, 3, "gradient", "32FC1", 2.0)
    assert grad[:, 0].tolist() == pytest.approx([4.0, 2.5, 1.0])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--storage", "zip"], "unknown storage format 'zip'"),
        (["--encoding", "yuv"], "unknown encoding 'yuv'"),
        (["--depth", "sphere"], "unknown depth 'sphere'"),
    ],
)
def test_bad_options_exit_2_without_traceback(
    robot_clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    out = tmp_path / "bag"
    assert main(["make", str(robot_clip), "-o", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not out.exists()


def test_bad_sources_exit_2(tmp_path: Path, robot_clip: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["make", str(tmp_path / "missing.mp4"), "-o", str(tmp_path / "a")]) == 2
    assert "does not exist" in capsys.readouterr().err
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(robot_clip.read_bytes()[:2000])
    assert main(["make", str(broken), "-o", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    assert not (tmp_path / "b").exists()
    (tmp_path / "empty").mkdir()
    assert main(["make", str(tmp_path / "empty"), "-o", str(tmp_path / "c")]) == 2
    assert "no images" in capsys.readouterr().err


def test_existing_output_is_not_overwritten(robot_clip: Path, tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(BagError, match="exists already"):
        make_bag([robot_clip], tmp_path / "taken")


def test_cli_make_prints_summary(
    robot_clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    assert (
        main(
            [
                "make",
                str(robot_clip),
                "-o",
                str(out),
                "--rate",
                "2",
                "--encoding",
                "bgr8",
                "--topic",
                "/front/image_raw",
                "--frame-id",
                "front",
            ]
        )
        == 0
    )
    assert "13 frames" in capsys.readouterr().out
    msgs = read_all(out)["/front/image_raw"]
    assert msgs[0][1].encoding == "bgr8" and msgs[0][1].header.frame_id == "front"  # type: ignore[attr-defined]
    # bgr8 decodes back to the same RGB pixels as the source.
    assert np.array_equal(message_to_array(msgs[0][1]), first_frame(robot_clip))
