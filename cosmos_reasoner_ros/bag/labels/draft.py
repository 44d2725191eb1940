"""A labels file drafted from a run's answers (`cosmos-reasoner-bag labels draft`): each answered request
becomes a label holding its answer in the task's own answer form, for a person to review, correct and extend
with acceptable alternatives. What could not be drafted (requests without an answer) is listed in comments."""

from __future__ import annotations

import json
from collections.abc import Sequence

import yaml

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels.schema import LABEL_VERSION
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.reasoner import TaskCatalog

__all__ = ["answer_text", "draft_labels", "record_kind"]


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(float(value), 3)


def record_kind(record: ResultRecord, catalog: TaskCatalog) -> str:
    """The record's answer kind: its task's in the catalog, else what the answer holds."""
    if record.task in catalog.tasks:
        return catalog.tasks[record.task].answer_kind
    if record.trajectories:
        return "points"
    if record.boxes:
        return "boxes"
    if record.segments:
        return "segments"
    return "choice" if record.choice else "text"


def answer_text(record: ResultRecord, kind: str) -> str:
    """The record's answer in the task's answer form (the model's own form, from the parsed values)."""
    if kind == "points":
        return json.dumps(
            [
                {"point_2d": [_number(p.x_norm), _number(p.y_norm)], "label": t.label}
                for t in record.trajectories
                for p in t.trajectory.points
            ]
        )
    if kind == "boxes":
        return json.dumps(
            [
                {
                    "bbox_2d": [
                        _number(v) for v in (b.box.x1_norm, b.box.y1_norm, b.box.x2_norm, b.box.y2_norm)
                    ],
                    "label": b.label,
                }
                for b in record.boxes
            ]
        )
    if kind == "segments":
        return json.dumps(
            [
                {"start": _number(s.start_s), "end": _number(s.end_s), "caption": s.caption}
                for s in record.segments
            ]
        )
    if kind == "choice":
        return record.choice
    return record.answer


def draft_labels(
    records: Sequence[ResultRecord], source: str = "", bag: str = "", catalog: TaskCatalog | None = None
) -> str:
    """The text of a labels file with one label per answered request of `bag` (every record when the run has
    one bag). BagError when the run holds several bags and none is chosen."""
    bags = sorted({r.bag for r in records})
    if bag:
        if bag not in bags:
            raise BagError(f"the run has no bag of that name; its bags: {', '.join(bags) or 'none'}")
        records = [r for r in records if r.bag == bag]
    elif len(bags) > 1:
        raise BagError(f"the run replayed {len(bags)} bags; choose one with --bag ({', '.join(bags)})")
    else:
        bag = bags[0] if bags else ""
    catalog = catalog if catalog is not None else TaskCatalog.load()
    labels: list[dict[str, object]] = []
    skipped: list[str] = []
    seen: set[tuple[str, str, str, float]] = set()
    for n, record in enumerate(records, start=1):
        kind = record_kind(record, catalog)
        key = (record.task, record.instruction, record.step, round(record.trigger_s, 6))
        if not record.answered_as(kind):
            skipped.append(f"#{n} {record.task} at {record.trigger_s:g} s: {record.outcome}")
            continue
        if key in seen:
            continue
        seen.add(key)
        label: dict[str, object] = {"task": record.task}
        if record.task not in catalog.tasks:
            label["kind"] = kind
        label["at"] = _number(record.trigger_s)
        if record.instruction:
            label["instruction"] = record.instruction
        if record.step:
            label["step"] = record.step
        label["answer"] = answer_text(record, kind)
        labels.append(label)
    head = [
        f"# Labels drafted by `cosmos-reasoner-bag labels draft` from {source or 'a run'}: "
        f"{len(labels)} labels.",
        "# Review every answer: correct it to what the recording shows, add acceptable alternatives as a",
        "# list `answers:`, loosen a label's `tolerances:` where the default does not fit, delete what",
        "# cannot be judged.",
        "# Coordinates are 0-1000 per axis from the top-left corner; times are seconds from the bag's start.",
    ]
    head += [f"# not drafted (no answer): {line}" for line in skipped]
    body: dict[str, object] = {"version": LABEL_VERSION}
    if bag:
        body["bag"] = bag
    body["labels"] = labels
    text = yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100)
    return "\n".join(head) + "\n" + text
