"""What an answer kind is: the parts every kind has (AnswerKind, the base class of each kind), the values
they pass (AnswerText for the parser, GradeContext for grading, MetricSpec and CompareCheck for the scores and
the judge), and the greedy pairing that several kinds grade by. Plain Python: the bag tools and the node reach
a kind through these."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

__all__ = [
    "AnswerKind",
    "AnswerText",
    "CompareCheck",
    "GradeContext",
    "GradeLimits",
    "MetricSpec",
    "greedy_mean",
    "greedy_min_mean",
    "greedy_pairs",
    "greedy_scores",
]

NAN = float("nan")
# Per-request values (a grade's, a comparison's), by name; NaN: not defined for this request.
Values = dict[str, float]
# Pixels in an image of (width, height) -> 3D points [m] per pixel (None where depth gave none).
Project = Callable[[Sequence[tuple[float, float]], tuple[int, int]], Sequence[tuple[float, ...] | None]]


@dataclass(frozen=True)
class AnswerText:
    """What a kind's parser reads: the answer after the reasoning, and the answer's whole JSON values
    (completeness.whole_values; none for a kind that reads no JSON)."""

    answer: str
    values: list[Any]
    size: tuple[int, int] | None  # the image the coordinates refer to (width, height); None: unknown
    raw: str  # the full text the answer came from, kept in every ParseError
    schema: Mapping[str, Any] | None = None  # the JSON schema the request carried as structured output


class GradeLimits(Protocol):
    """The label's tolerances a grade applies (bag/labels' LabelTolerances)."""

    @property
    def iou_min(self) -> float: ...

    @property
    def tiou_min(self) -> float: ...

    @property
    def match_min(self) -> float: ...


@dataclass(frozen=True)
class GradeContext:
    limits: GradeLimits
    project: Project | None = None  # 3D points from the recording's depth (None: in the image only)


@dataclass(frozen=True)
class MetricSpec:
    """A score metric: the per-request value it summarises, by which statistic, which direction is better."""

    name: str  # the name in scores.json
    column: str  # the per-request value it summarises (a grade's values)
    statistic: str  # mean | share (a mean of 0/1) | p50 | p95 (nearest rank), over the requests that have it
    better: str  # higher | lower | "" (neither: reported, never ranked)
    unit: str = ""
    description: str = ""

    def sign(self) -> int:
        return {"higher": 1, "lower": -1}.get(self.better, 0)


@dataclass(frozen=True)
class CompareCheck:
    """A tolerance the judge applies to a comparison's value: `metric` against the request tolerance named
    `tolerance` (op "<=" or ">="), or for op "==" a flag tolerance that asks both answers' values be equal."""

    name: str  # the check's name in the verdict
    metric: str  # the comparison's value it reads
    tolerance: str  # the field of the judge's request tolerances that holds its limit (None there: off)
    op: str  # "<=" | ">=" | "=="
    unit: str = ""


class AnswerKind(ABC):
    """One answer kind and every part of it; kinds/__init__.KINDS holds one instance of each.

    A kind is a class in its own module (`class BoxesKind(AnswerKind)`, and `KIND = BoxesKind()`): its
    docstring is its one-line description for people, its facts are class attributes beside the methods they
    concern, and its parts are methods. A kind that lacks a fact fails when its class is defined, one that
    lacks a method when it is made (TypeError, at import), so a forgotten part fails loudly.

    `slot` names the field of the parsed answer (parsing.ParsedAnswer) and of a run's record (ResultRecord)
    that holds the kind's values: parser values there (Trajectory, Box2D, Segment, str), and in a record the
    same in the camera image they refer to (`held`). Kinds may share a slot (region captions are boxes with
    captions): the node publishes and records them as the slot's values."""

    # ---- facts every kind declares ---
    name: ClassVar[str]  # as tasks.yaml's answer_kind says
    slot: ClassVar[str]
    label_form: ClassVar[str]  # how a label's answer of this kind is written (labels files, error messages)
    rank: ClassVar[tuple[str, int]]  # the grade value that picks the best acceptable answer, and its sign
    metrics: ClassVar[tuple[MetricSpec, ...]]  # the task metrics a kind's grades are scored by

    # ---- facts a kind declares where it differs ---
    extra_metrics: ClassVar[tuple[MetricSpec, ...]] = ()  # scored where present (points: metres, with depth)
    compare_checks: ClassVar[tuple[CompareCheck, ...]] = ()
    structured: ClassVar[bool] = True  # a JSON answer read whole (completeness), <think>/<answer> closed
    timed: ClassVar[bool] = False  # answers in times of the clip: frames go to the model with their times
    path: ClassVar[bool] = False  # answers are a path in the image: the Nav2 handoff follows it, graded so
    free_text: ClassVar[bool] = False  # answers in words: a judge model may compare meanings
    # A label's values as the report shows them, where they say more than its answer text (a choice's letter).
    show: Callable[[Any], str] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The facts named here without a default (the first block above) are every kind's to declare.
        missing = [fact for fact in AnswerKind.__annotations__ if not hasattr(cls, fact)]
        if not (cls.__doc__ or "").strip():
            missing.append("description (its docstring)")
        if missing:
            raise TypeError(f"answer kind {cls.__name__} lacks {', '.join(missing)}")

    @property
    def description(self) -> str:
        """One line for people: the first line of the kind's docstring."""
        return (type(self).__doc__ or "").strip().splitlines()[0]

    @property
    def perfect(self) -> dict[str, float]:
        """Grade values of an answer equal to its label (the tests' oracle): each metric's best, 1 for a value
        that is higher when better (a share or a ratio up to 1), 0 for a lower-better one (a distance)."""
        return {m.column: 1.0 if m.sign() > 0 else 0.0 for m in self.metrics}

    @property
    def unanswered(self) -> dict[str, float]:
        """Grade values of a request without an answer of this kind: nothing matched (0) for a higher-better
        value, no distance (NaN) for a lower-better one."""
        return {m.column: 0.0 if m.sign() > 0 else NAN for m in self.metrics}

    # ---- parts every kind has ---
    @abstractmethod
    def parse(self, text: AnswerText) -> Any:
        """The slot's values; ParseError when the answer holds none."""

    @abstractmethod
    def draft(self, values: Any) -> str:
        """A label's answer text from a record's values, in the model's own form."""

    @abstractmethod
    def grade(self, ours: Any, theirs: Any, context: GradeContext) -> tuple[Values, list[str]]:
        """Record values against a label's: values by grade column, notes."""

    @abstractmethod
    def compare(self, baseline: Any, current: Any) -> tuple[Values, list[str]]:
        """Baseline record values against current ones: values by comparison metric, notes."""

    @abstractmethod
    def to_json(self, values: Any) -> Any:
        """Parser values as cosmos-reasoner-parse prints them."""

    @abstractmethod
    def dump(self, values: Any) -> Any:
        """Record values as results.jsonl holds them."""

    @abstractmethod
    def load(self, data: Any) -> Any:
        """... and back."""

    def held(self, values: Any, camera: str, width: int, height: int) -> Any:
        """Record values from parser values, in the image of one camera (default: as they are)."""
        return values

    def holds(self, values: Any) -> bool:
        """The values hold an answer of this kind (what scoring grades, `labels draft` drafts)."""
        return bool(values.strip() if isinstance(values, str) else values)

    def __repr__(self) -> str:
        return f"AnswerKind({self.name!r})"


def greedy_pairs(n: int, m: int, score: Callable[[int, int], float]) -> list[tuple[float, int, int]]:
    """Items of two lists paired by the highest score first: (score, i, j) per pair, best first."""
    pairs = sorted(((score(i, j), i, j) for i in range(n) for j in range(m)), reverse=True)
    used_a: set[int] = set()
    used_b: set[int] = set()
    out = []
    for s, i, j in pairs:
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
            out.append((s, i, j))
    return out


def greedy_scores(n: int, m: int, score: Callable[[int, int], float]) -> list[float]:
    """Pair items of two lists by the highest score first; one score per item of either list (unpaired: 0)."""
    pairs = greedy_pairs(n, m, score)
    return [s for s, _, _ in pairs] + [0.0] * ((n - len(pairs)) + (m - len(pairs)))


def greedy_mean(n: int, m: int, score: Callable[[int, int], float]) -> float:
    """How well two lists match as a whole: the mean of greedy_scores (0 where both lists are empty)."""
    scores = greedy_scores(n, m, score)
    return float(np.mean(scores)) if scores else 0.0


def greedy_min_mean(n: int, m: int, score: Callable[[int, int], float]) -> tuple[float, float]:
    """The lowest and the mean of greedy_scores: a comparison's worst item and its whole (ValueError where
    both lists are empty)."""
    scores = greedy_scores(n, m, score)
    return min(scores), float(np.mean(scores))
