"""Answers for the Nav2 handoff's tests: a camera looking at a flat floor, drive_path answers drawn on it (as
the node's outcomes, or as the text the scripted server answers), and handoff settings that fit them."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from cosmos_reasoner_ros.geometry import Intrinsics
from cosmos_reasoner_ros.handoff import HandoffSettings
from cosmos_reasoner_ros.reasoner import parse_answer
from cosmos_reasoner_ros.requests import Check, ClipSummary, Outcome

W, H = 640, 480
K = [500.0, 0.0, 320.0, 0.0, 480.0, 240.0, 0.0, 0.0, 1.0]
INTRINSICS = Intrinsics.from_k(K, W, H)
HEIGHT_M, PITCH_DEG = 0.5, 20.0  # a camera half a metre up, looking 20 degrees down: the horizon at row 65
NS = 1_000_000_000
FRAME = "front_optical"
TASK = "drive_path"

# 0-1000 points on the image: straight ahead from near the robot (0.5 m) to about 1.4 m, bending right.
AHEAD = ((500, 950), (500, 820), (510, 700), (530, 600), (560, 520))
LEFT = ((500, 950), (470, 820), (430, 700), (380, 600), (320, 520))
TO_THE_SKY = ((500, 950), (500, 600), (500, 100))  # its last point above the horizon
FAR_START = ((500, 400), (500, 350), (500, 300))  # starts about 2.2 m away


def points_text(points: tuple[tuple[int, int], ...], label: str = "robot path") -> str:
    items = ", ".join(f'{{"point_2d": [{x}, {y}], "label": "{label}"}}' for x, y in points)
    return f"<think>\nThe floor ahead is clear.\n</think>\n\n```json\n[{items}]\n```"


def settings(**overrides: Any) -> HandoffSettings:
    base = HandoffSettings(
        mode="follow_path",
        camera="front",
        camera_height_m=HEIGHT_M,
        camera_pitch_deg=PITCH_DEG,
        max_age_s=1.0,
    )
    return dataclasses.replace(base, **overrides)


def outcome(
    points: tuple[tuple[int, int], ...] = AHEAD,
    *,
    request_id: str = "r1",
    clip_id: str = "",
    clip_end_ns: int = 100 * NS,
    success: bool = True,
    error_kind: str = "",
    task: str = TASK,
    camera: str = "front",
    checks: tuple[Check, ...] = (),
) -> Outcome:
    answered = success or error_kind == "stale"  # a stale answer keeps what it said
    parsed = parse_answer(points_text(points), "points", width=W, height=H) if answered else None
    return Outcome(
        request_id=request_id,
        task=task,
        instruction="go to the door",
        success=success,
        error_kind=error_kind,
        error="" if success else f"{error_kind or 'timeout'}: crafted",
        parsed=parsed,
        answer_camera=camera,
        cameras=(camera,),
        image_width=W,
        image_height=H,
        clip_id=clip_id or request_id,
        trigger_ns=clip_end_ns,
        checks=checks,
        clips=(ClipSummary(camera, clip_end_ns - 2 * NS, clip_end_ns, 8, 4.0, W, H, (W, H)),),
    )


class Clock:
    """A steady clock the test moves (a Handoff's `clock`)."""

    def __init__(self) -> None:
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s


class StopsAndActivates:
    """The node's stop (deactivate, shutdown) and its activation again, as rules of a handoff state machine
    that has `handoff` (once initialised), `now`, `stopped` and `check(step)`."""

    handoff: Any
    now: int
    stopped: bool

    def check(self, step: Any) -> None:
        raise NotImplementedError

    @precondition(lambda self: hasattr(self, "handoff") and not self.stopped)
    @rule(why=st.sampled_from(["deactivate", "shutdown"]))
    def node_stops(self, why: str) -> None:
        self.check(self.handoff.stop(self.now, why))
        self.stopped = True

    @precondition(lambda self: self.stopped)
    @rule()
    def node_activates(self) -> None:
        self.handoff.activate()
        self.stopped = False
