"""bag_report: JSONL records to an escaped HTML page whose images exist (and load in headless Chromium) and
matplotlib plots; bad JSONL exits with 2."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import cv2
import numpy as np
import pytest
from support.reports import CHROMIUM, chromium_image_widths

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.records import CameraBox, CameraTrajectory
from cosmos_reasoner_ros.bag.report.html import (
    ResultRecord,
    Summary,
    load_records,
    write_records,
    write_report,
)
from cosmos_reasoner_ros.geometry.shapes import Box2D, Point2D, Trajectory
from cosmos_reasoner_ros.reasoner.parsing import Segment

EVIL = "<script>alert('x')</script> & \"quoted\""


def sample_records(folder: Path, robot_frame: np.ndarray) -> list[ResultRecord]:
    (folder / "images").mkdir(parents=True, exist_ok=True)
    names = ["images/0001 next action.jpg", "images/0002_trajectory#1.png"]
    for name in names:
        cv2.imwrite(str(folder / name), cv2.cvtColor(robot_frame, cv2.COLOR_RGB2BGR))
    return [
        ResultRecord(
            request_id="r1",
            task="next_action",
            success=True,
            answer=EVIL,
            reasoning="because " + EVIL,
            latency_s=1.5,
            ttft_s=0.2,
            image=names[0],
            trigger_s=2.0,
            clip_frames=8,
        ),
        ResultRecord(
            request_id="r2",
            task="trajectory",
            instruction="pick up the cube",
            success=True,
            answer="[...]",
            latency_s=2.5,
            ttft_s=0.3,
            image=names[1],
            trajectories=(
                CameraTrajectory(
                    Trajectory(
                        "gripper",
                        (
                            Point2D("gripper", 100.0, 200.0, 64.4, 95.2),
                            Point2D("gripper", 300.0, 400.0, 193.2, 190.4),
                        ),
                    ),
                    "camera",
                    644,
                    476,
                ),
            ),
            boxes=(
                CameraBox(Box2D("cube", 1.0, 2.0, 3.0, 4.0, 0.644, 0.952, 1.932, 1.904), "camera", 644, 476),
            ),
            segments=(Segment(0.5, 1.0, "arm reaches"),),
        ),
        ResultRecord(request_id="r3", task="next_action", error_kind="timeout", error="no answer in 120 s"),
        ResultRecord(request_id="r4", task="next_action", error_kind="busy", error="busy"),
        ResultRecord(request_id="r5", task="next_action", success=True, latency_s=3.5, ttft_s=0.4),
    ]


@pytest.fixture
def robot_frame(robot_clip: Path) -> np.ndarray:
    import av

    with av.open(str(robot_clip)) as c:
        return next(c.decode(video=0)).to_ndarray(format="rgb24")


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.srcs: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.srcs.append(dict(attrs)["src"] or "")
        self.scripts += tag == "script"


def test_html_escapes_text_and_references_existing_images(tmp_path: Path, robot_frame: np.ndarray) -> None:
    records = sample_records(tmp_path, robot_frame)
    files = write_report(records, tmp_path, title="eval <1>")
    page = files.index.read_text()
    parser = _Images()
    parser.feed(page)
    assert parser.scripts == 0  # the answer's <script> is text, not markup
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;quoted&quot;" in page
    assert "<title>eval &lt;1&gt;</title>" in page
    # Two frames and three plots, every one a relative path to an existing file.
    assert len(parser.srcs) == 5
    for src in parser.srcs:
        assert not src.startswith(("/", "file:")), src
        assert (tmp_path / unquote(src)).is_file(), src
    assert (
        "images/0001%20next%20action.jpg" in parser.srcs and "images/0002_trajectory%231.png" in parser.srcs
    )
    assert "gripper" in page and "(100,200) (300,400)" in page and "arm reaches" in page
    assert "timeout" in page and "no answer in 120 s" in page
    assert "latency median 2.500 s" in page
    for plot in files.plots:
        img = cv2.imread(str(plot))
        assert img is not None and img.shape[0] > 200 and img.std() > 5  # drawn, not blank


def test_summary_and_jsonl_round_trip(tmp_path: Path, robot_frame: np.ndarray) -> None:
    records = sample_records(tmp_path, robot_frame)
    write_records(records, tmp_path / "results.jsonl")
    loaded = load_records(tmp_path / "results.jsonl")
    assert loaded == records
    s = Summary.of(loaded)
    assert s.requests == 5 and s.outcomes == {"success": 3, "timeout": 1, "busy": 1}
    assert s.latency_median_s == 2.5 and s.latency_p95_s == 3.5 and s.ttft_median_s == pytest.approx(0.3)


def test_outcome_plot_counts_match(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [ResultRecord(success=True, latency_s=1.0)] * 3 + [ResultRecord(error_kind="rejected")]
    files = write_report(records, tmp_path)
    assert [p.name for p in files.plots] == ["latency.png", "ttft.png", "outcomes.png"]
    assert plt.get_fignums() == []  # every figure closed: no leak in long evaluations
    assert "<td>success</td><td>3</td>" in files.index.read_text()
    assert "<td>rejected</td><td>1</td>" in files.index.read_text()


def test_report_cli_and_bad_jsonl(
    tmp_path: Path, robot_frame: np.ndarray, capsys: pytest.CaptureFixture[str]
) -> None:
    write_records(sample_records(tmp_path, robot_frame), tmp_path / "results.jsonl")
    assert main(["report", str(tmp_path / "results.jsonl")]) == 0
    assert (tmp_path / "index.html").is_file() and (tmp_path / "plots" / "latency.png").is_file()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "x"}\n[1, 2]\n')
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2: not a result record" in err and "Traceback" not in err
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2
    with pytest.raises(BagError):
        load_records(tmp_path / "missing.jsonl")


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
)
def test_images_load_in_headless_chromium(tmp_path: Path, robot_frame: np.ndarray) -> None:
    report = tmp_path / "report"
    files = write_report(sample_records(report, robot_frame), report)
    widths = chromium_image_widths(files.index, tmp_path)
    assert len(widths) == 5
    assert all(w > 100 for w in widths[:3])  # the plots come first
    assert widths[3:] == [robot_frame.shape[1]] * 2  # then the two frames, at their real size
    # The probe notices a broken reference: the check is not vacuous.
    shutil.move(report / "images", tmp_path / "moved")
    assert chromium_image_widths(files.index, tmp_path)[3:] == [0, 0]


def test_make_and_report_need_no_ros(robot_clip: Path, tmp_path: Path, robot_frame: np.ndarray) -> None:
    """The ROS-free sub-commands run where rclpy is not importable (a pip install on a workstation)."""
    import json
    import sys

    write_records(sample_records(tmp_path, robot_frame), tmp_path / "results.jsonl")
    code = (
        "import sys\n"
        "for name in ('rclpy', 'cosmos_reasoner_ros.msg', 'cosmos_reasoner_ros.action'):\n"
        "    sys.modules[name] = None\n"
        "from cosmos_reasoner_ros.bag.cli import main\n"
        "assert main(sys.argv[1:4]) == 0\n"
        "assert main(['make', sys.argv[4], '-o', sys.argv[5], '--rate', '1']) == 0\n"
        "assert 'rclpy' not in sys.modules or sys.modules['rclpy'] is None\n"
        "import json\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('cosmos_reasoner_ros'))))\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "report",
            str(tmp_path / "results.jsonl"),
            "--title=x",
            str(robot_clip),
            str(tmp_path / "bag"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert (
        "cosmos_reasoner_ros.bag.replay.play" not in loaded
        and "cosmos_reasoner_ros.bag.replay.record" not in loaded
    )
    assert (tmp_path / "index.html").is_file() and (tmp_path / "bag" / "metadata.yaml").is_file()


def test_difference_frame_draws_both_answers(robot_frame: np.ndarray) -> None:
    from cosmos_reasoner_ros.bag.report.frames import annotated_frame, difference_frame

    def with_point(x: float) -> ResultRecord:
        t = Trajectory("gripper", (Point2D("gripper", x, 500.0), Point2D("gripper", x, 900.0)))
        return ResultRecord(
            task="trajectory",
            success=True,
            answer="```json\n[...]\n```",
            trajectories=(CameraTrajectory(t, "camera", 644, 476),),
        )

    base, cur = with_point(200.0), with_point(800.0)
    drawn = difference_frame(base, cur, robot_frame)
    h, w = robot_frame.shape[:2]
    assert drawn.shape[0] > h and drawn.shape[1] == w  # the frame and a band with both answers below it
    y = round(0.7 * h)  # on both drawn paths, between their points
    for x in (round(0.2 * w), round(0.8 * w)):
        assert (
            np.abs(
                drawn[y - 2 : y + 3, x - 2 : x + 3].astype(int) - robot_frame[y - 2 : y + 3, x - 2 : x + 3]
            ).mean()
            > 30
        )
    # One answer alone draws only its own path; the other place stays as it was.
    single = annotated_frame(base, robot_frame)
    x = round(0.8 * w)
    assert np.array_equal(single[y - 2 : y + 3, x - 2 : x + 3], robot_frame[y - 2 : y + 3, x - 2 : x + 3])
