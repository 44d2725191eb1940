"""Which request each label is about: labels bound to the run's bags, then each request matched by bag, task,
instruction, step and trigger time. What does not match is kept and said: a label whose moment no request
asked about, a labelled task the run never asked, requests without a label, a request two labels fit."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels.schema import Label, LabelSet
from cosmos_reasoner_ros.bag.records import ResultRecord

__all__ = ["Labelled", "Matching", "bind_labels", "match_labels"]


@dataclass(frozen=True)
class Labelled:
    """A request of the run and the label it is scored against."""

    position: int  # the record's index in the run
    record: ResultRecord
    label: Label
    source: str = ""  # the labels file


@dataclass(frozen=True)
class Matching:
    labelled: tuple[Labelled, ...]
    unmatched: tuple[tuple[str, Label], ...] = ()  # (file, label): no request of the run matched it
    unasked: tuple[tuple[str, str], ...] = ()  # (file, task): labelled, but the run never asked the task
    unlabelled: Mapping[str, int] = field(default_factory=dict)  # task -> requests without a label
    ambiguous: tuple[
        str, ...
    ] = ()  # a request several labels fit (the most specific, then the first, is used)

    def problems(self) -> list[str]:
        """One line per label or task that was not scored (never quoting the labels' content)."""
        lines = [
            f"{source}: {label.where} ({label.task} at {label.when}): no request of this run matched it"
            for source, label in self.unmatched
        ]
        lines += [
            f"{source}: task {task} is labelled but this run did not ask it" for source, task in self.unasked
        ]
        return lines + list(self.ambiguous)


def bind_labels(sets: Sequence[LabelSet], bags: Sequence[str]) -> dict[str, LabelSet]:
    """Each labels file to the bag it is for: the bag it names, or the run's only bag. BagError when a file
    names a bag the run does not replay, when several files are for one bag, or a file without a bag name
    meets a run of several bags."""
    bound: dict[str, LabelSet] = {}
    for labels in sets:
        if len(bags) == 1 and (not labels.bag or not bags[0] or labels.bag == bags[0]):
            bag = bags[0]
        elif not labels.bag:
            raise BagError(
                f"labels file {labels.source} names no bag (bag: NAME) and this run replays {len(bags)} bags"
            )
        elif labels.bag in bags:
            bag = labels.bag
        else:
            raise BagError(f"labels file {labels.source} is for a bag this run does not replay")
        if bag in bound:
            raise BagError(f"labels files {bound[bag].source} and {labels.source} are both for one bag")
        bound[bag] = labels
    return bound


class _Index:
    """One file's labels by task and time: a run of thousands of requests finds its labels by bisection."""

    def __init__(self, labels: LabelSet) -> None:
        self.labels = labels
        self.times: dict[str, list[tuple[float, int]]] = {}
        self.spans: dict[str, list[int]] = {}
        self.slack = max((lb.tolerances.time_s for lb in labels.labels), default=0.0) + 1e-6
        for i, label in enumerate(labels.labels):
            if label.between is not None:
                self.spans.setdefault(label.task, []).append(i)
            for t in label.at:
                self.times.setdefault(label.task, []).append((t, i))
        for entries in self.times.values():
            entries.sort()

    def candidates(self, record: ResultRecord) -> list[Label]:
        found: set[int] = set(self.spans.get(record.task, ()))
        entries = self.times.get(record.task, [])
        lo = bisect.bisect_left(entries, (record.trigger_s - self.slack, -1))
        for t, i in entries[lo:]:
            if t > record.trigger_s + self.slack:
                break
            found.add(i)
        out = []
        for i in sorted(found):
            label = self.labels.labels[i]
            if label.covers(record.trigger_s) and label.fits(record.task, record.instruction, record.step):
                out.append(label)
        return out


def _specificity(label: Label) -> tuple[bool, bool, bool, int]:
    return (label.instruction is None, label.step is None, label.between is not None, label.index)


def match_labels(records: Sequence[ResultRecord], bound: Mapping[str, LabelSet]) -> Matching:
    """Every request with the label it is about (see bind_labels for which file applies to which bag)."""
    indexes = {bag: _Index(labels) for bag, labels in bound.items()}
    labelled: list[Labelled] = []
    used: set[tuple[str, int]] = set()
    unlabelled: Counter[str] = Counter()
    ambiguous: list[str] = []
    asked: dict[str, set[str]] = {}
    for position, record in enumerate(records):
        index = indexes.get(record.bag)
        if index is None:
            unlabelled[record.task] += 1
            continue
        asked.setdefault(record.bag, set()).add(record.task)
        found = index.candidates(record)
        if not found:
            unlabelled[record.task] += 1
            continue
        found.sort(key=_specificity)
        label = found[0]
        if len(found) > 1:
            others = ", ".join(other.where for other in found[1:])
            ambiguous.append(
                f"{index.labels.source}: request #{position + 1} ({record.task} at {record.trigger_s:g} s) "
                "fits "
                f"{label.where} and {others}; {label.where} is used"
            )
        used.add((record.bag, label.index))
        labelled.append(Labelled(position, record, label, index.labels.source))
    unmatched: list[tuple[str, Label]] = []
    unasked: list[tuple[str, str]] = []
    for bag, labels in bound.items():
        tasks = asked.get(bag, set())
        for task in sorted(labels.tasks - tasks):
            unasked.append((labels.source, task))
        for label in labels.labels:
            if label.task in tasks and (bag, label.index) not in used:
                unmatched.append((labels.source, label))
    return Matching(
        tuple(labelled), tuple(unmatched), tuple(unasked), dict(sorted(unlabelled.items())), tuple(ambiguous)
    )
