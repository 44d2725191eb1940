"""A labels file drafted from a run's answers (`cosmos-reasoner-bag labels draft`): each answered request
becomes a label holding its answer in the task's own answer form, for a person to review, correct and extend
with acceptable alternatives. What could not be drafted (requests without an answer) is listed in comments."""

from __future__ import annotations

from collections.abc import Sequence

import yaml

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels.schema import LABEL_VERSION
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.reasoner import TEXT, TaskCatalog, kind_of, slot_kinds

__all__ = ["answer_text", "draft_labels", "record_kind"]


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(float(value), 3)


def record_kind(record: ResultRecord, catalog: TaskCatalog) -> str:
    """The record's answer kind: its task's in the catalog, else the first kind whose values the answer holds
    (reasoner.slot_kinds: the structured kinds first, then text)."""
    if record.task in catalog.tasks:
        return catalog.tasks[record.task].answer_kind
    found = (k for k in slot_kinds() if k.holds(getattr(record, k.slot)))
    return next(found, TEXT).name


def answer_text(record: ResultRecord, kind: str) -> str:
    """The record's answer in the task's answer form (the model's own form, from the parsed values)."""
    unit = kind_of(kind)
    return unit.draft(getattr(record, unit.slot))


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
