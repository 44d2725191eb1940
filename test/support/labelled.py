"""Labelled runs for tests and benchmarks: result records made as the node makes them (answers parsed by the
project's parser, pixels for the camera image), and generated runs whose answers are the labels with a known
amount of noise, together with the labels file they are scored against."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from cosmos_reasoner_ros.bag.records import CameraBox, CameraTrajectory, ResultRecord
from cosmos_reasoner_ros.reasoner import parse_answer

WIDTH, HEIGHT = 640, 480


def record(
    task: str,
    at: float,
    text: str,
    kind: str,
    *,
    bag: str = "robot",
    instruction: str = "",
    step: str = "",
    latency_s: float = 0.3,
    tokens: int = 20,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> ResultRecord:
    """A successful request whose answer `text` is parsed as `kind`, as the node records it."""
    parsed = parse_answer(text, kind, width, height)
    return ResultRecord(
        request_id=f"{task}-{at:g}-{instruction}",
        task=task,
        instruction=instruction,
        step=step,
        trigger_s=at,
        success=True,
        answer=parsed.answer,
        choice=parsed.choice or "",
        trajectories=tuple(CameraTrajectory(t, "camera", width, height) for t in parsed.trajectories),
        boxes=tuple(CameraBox(b, "camera", width, height) for b in parsed.boxes),
        segments=parsed.segments,
        latency_s=latency_s,
        completion_tokens=tokens,
        bag=bag,
        model="scripted",
    )


def failed(
    task: str, at: float, kind: str = "timeout", *, bag: str = "robot", instruction: str = ""
) -> ResultRecord:
    return ResultRecord(
        task=task, instruction=instruction, trigger_s=at, error_kind=kind, error="no answer", bag=bag
    )


def points_text(points: Sequence[tuple[float, float]], label: str = "gripper trajectory") -> str:
    return json.dumps([{"point_2d": [round(x, 1), round(y, 1)], "label": label} for x, y in points])


def boxes_text(boxes: Sequence[tuple[float, float, float, float]], label: str = "cup") -> str:
    return json.dumps([{"bbox_2d": [round(v, 1) for v in b], "label": label} for b in boxes])


def segments_text(segments: Sequence[tuple[float, float]]) -> str:
    return json.dumps([{"start": round(a, 3), "end": round(b, 3), "caption": "event"} for a, b in segments])


SENTENCES = (
    "Put the bottle into the box.",
    "Close the gripper around the cup.",
    "Move the left arm up.",
    "Open the drawer with the right hand.",
    "Place the package on the shelf.",
    "Push the button on the panel.",
)
WRONG_SENTENCE = "Wave at the camera while standing still."


@dataclass(frozen=True)
class LabelledRun:
    records: list[ResultRecord]
    labels_text: str  # the labels file the records are scored against


def generated_run(
    requests: int, noise: float, seed: int = 0, bag: str = "robot", wrong: bool = False
) -> LabelledRun:
    """`requests` requests over the five answer kinds, answered as the labels say with noise: points moved by
    up to `noise` x 100 (0-1000 units), boxes and segments shifted by `noise` of their size on average (0 to
    twice that), a choice or a
    sentence wrong with probability `noise`. wrong: every answer far from its label."""
    rng = random.Random(seed)
    truth = random.Random(12345)  # the labels do not depend on the noise or the seed
    records: list[ResultRecord] = []
    labels: list[dict[str, object]] = []
    for i in range(requests):
        at = round(0.5 * (i + 1), 3)
        kind = ("points", "boxes", "segments", "choice", "text")[i % 5]
        task = {
            "points": "trajectory",
            "boxes": "grounding_2d",
            "segments": "temporal_localization",
            "choice": "plausibility",
            "text": "next_action",
        }[kind]
        if kind == "points":
            pts = [(truth.uniform(100, 900), truth.uniform(100, 900)) for _ in range(4)]
            if wrong:
                answer = [(1000 - x, 1000 - y) for x, y in pts]
            else:
                answer = [
                    (x + rng.uniform(-1, 1) * noise * 100, y + rng.uniform(-1, 1) * noise * 100)
                    for x, y in pts
                ]
            label_text, answer_text = (
                points_text(pts),
                points_text([(min(max(x, 0), 1000), min(max(y, 0), 1000)) for x, y in answer]),
            )
        elif kind == "boxes":
            x1, y1 = truth.uniform(50, 500), truth.uniform(50, 500)
            box = (x1, y1, x1 + truth.uniform(100, 400), y1 + truth.uniform(100, 400))
            w, h = box[2] - box[0], box[3] - box[1]
            spread = noise * rng.uniform(0, 2)  # a shift of `noise` of the box's size on average
            dx, dy = (
                (w * 2, h * 2)
                if wrong
                else (w * spread * rng.choice((-1, 1)), h * spread * rng.choice((-1, 1)))
            )
            moved = (box[0] + dx, box[1] + dy, box[2] + dx, box[3] + dy)
            moved = tuple(min(max(v, 0.0), 1000.0) for v in moved)
            if moved[2] - moved[0] < 1 or moved[3] - moved[1] < 1:
                moved = (0.0, 0.0, 5.0, 5.0)
            label_text, answer_text = boxes_text([box]), boxes_text([moved])  # type: ignore[list-item]
        elif kind == "segments":
            start = truth.uniform(0, 3)
            seg = (start, start + truth.uniform(0.5, 2))
            length = seg[1] - seg[0]
            shift = length * 3 if wrong else length * noise * rng.uniform(0, 2) * rng.choice((-1, 1))
            moved = (max(0.0, seg[0] + shift), max(0.0, seg[1] + shift))
            label_text, answer_text = segments_text([seg]), segments_text([moved])
        elif kind == "choice":
            right = truth.choice("AB")
            flip = wrong or rng.random() < noise
            label_text, answer_text = right, ("B" if right == "A" else "A") if flip else right
        else:
            right = truth.choice(SENTENCES)
            flip = wrong or rng.random() < noise
            label_text, answer_text = right, WRONG_SENTENCE if flip else right
        labels.append({"task": task, "at": at, "answer": label_text})
        records.append(
            record(task, at, answer_text, kind, bag=bag, latency_s=0.2 + 0.01 * (i % 7), tokens=10 + i % 5)
        )
    text = "version: 1\nlabels:\n" + "".join(f"  - {json.dumps(label)}\n" for label in labels)
    return LabelledRun(records, text)
