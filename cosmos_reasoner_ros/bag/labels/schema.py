"""What a labels file holds: for a bag, at bag times, a task's right answer(s) as the parser reads them, with
the tolerances that judge an answer against them. Plain values; loading.py reads them from YAML."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cosmos_reasoner_ros.reasoner import ParsedAnswer

__all__ = ["LABEL_VERSION", "Label", "LabelSet", "LabelTolerances"]

LABEL_VERSION = 1


@dataclass(frozen=True)
class LabelTolerances:
    """How a request is matched to a label and when an answer counts as right (config/labels_example.yaml
    documents each)."""

    time_s: float = 0.05  # [s] a request triggered this close to a label's time is asked about it
    iou_min: float = 0.5  # [0-1] a box answer with at least this IoU counts in iou50
    tiou_min: float = 0.5  # [0-1] a segment answer with at least this temporal IoU counts in tiou50
    match_min: float = 0.8  # [0-1] a text answer this similar to an acceptable one (normalised words) matches


@dataclass(frozen=True)
class Label:
    """One label: a task asked at some bag times (or within a span of them) and its acceptable answers."""

    index: int  # position in the file's `labels` list
    line: int  # 1-based line of the label in its file (0: not from a file)
    task: str
    kind: str  # the task's answer kind (a name of reasoner.KINDS)
    answers: tuple[ParsedAnswer, ...]  # the acceptable answers, parsed as the model's are
    at: tuple[float, ...] = ()  # [s from the bag's start] trigger times
    between: tuple[float, float] | None = None  # [s] every trigger within this span (inclusive)
    instruction: str | None = None  # None: a request of the task with any instruction
    step: str | None = None  # None: any step
    tolerances: LabelTolerances = field(default_factory=LabelTolerances)
    note: str = ""

    @property
    def where(self) -> str:
        """How messages name the label: its position and line, never its content."""
        line = f" (line {self.line})" if self.line else ""
        return f"labels[{self.index}]{line}"

    @property
    def when(self) -> str:
        if self.between is not None:
            return f"{self.between[0]:g}-{self.between[1]:g} s"
        return ", ".join(f"{t:g}" for t in self.at) + " s"

    def covers(self, trigger_s: float) -> bool:
        """A request triggered at `trigger_s` (bag time from the start) is asked about this label's moment."""
        slack = self.tolerances.time_s + 1e-9
        if self.between is not None:
            return self.between[0] - slack <= trigger_s <= self.between[1] + slack
        return any(abs(trigger_s - t) <= slack for t in self.at)

    def fits(self, task: str, instruction: str, step: str) -> bool:
        return (
            task == self.task
            and (self.instruction is None or self.instruction == instruction)
            and (self.step is None or self.step == step)
        )

    def __post_init__(self) -> None:
        if not self.answers:
            raise ValueError("a label needs at least one acceptable answer")
        if not all(math.isfinite(t) for t in self.at):
            raise ValueError("label times must be finite")


@dataclass(frozen=True)
class LabelSet:
    """The labels of one bag (one labels file)."""

    labels: tuple[Label, ...]
    bag: str = ""  # the bag's name (folder or file name); "": the run's only bag
    source: str = ""  # where the labels came from (the file), for messages and the report

    @property
    def tasks(self) -> set[str]:
        return {label.task for label in self.labels}
