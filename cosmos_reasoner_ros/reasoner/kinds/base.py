"""What an answer kind is: the parts every kind has (AnswerKind), the values they pass (AnswerText for the
parser, GradeContext for grading, MetricSpec and CompareCheck for the scores and the judge), and the greedy
pairing that several kinds grade by. Plain Python: the bag tools and the node reach a kind through these."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "AnswerKind",
    "AnswerText",
    "CompareCheck",
    "GradeContext",
    "GradeLimits",
    "MetricSpec",
    "greedy_pairs",
    "greedy_scores",
]

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


def _identity(values: Any, *_: Any) -> Any:
    return values


@dataclass(frozen=True, eq=False)
class AnswerKind:
    """One answer kind and every part of it; kinds/__init__.KINDS holds them by name.

    `slot` names the field of the parsed answer (parsing.ParsedAnswer) and of a run's record (ResultRecord)
    that holds the kind's values: parser values there (Trajectory, Box2D, Segment, str), and in a record the
    same in the camera image they refer to (`held`). Kinds may share a slot (region captions are boxes with
    captions): the node publishes and records them as the slot's values."""

    name: str  # as tasks.yaml's answer_kind says
    slot: str
    description: str  # one line for people
    parse: Callable[[AnswerText], Any]  # the slot's values; ParseError when the answer holds none
    label_form: str  # how a label's answer of this kind is written (labels files, error messages)
    draft: Callable[[Any], str]  # a label's answer text from a record's values, in the model's own form
    grade: Callable[[Any, Any, GradeContext], tuple[Values, list[str]]]  # record values vs a label's
    rank: tuple[str, int]  # the grade value that picks the best acceptable answer, and its better sign
    perfect: Mapping[str, float]  # grade values of an answer equal to its label (the tests' oracle)
    unanswered: Mapping[str, float]  # grade values of a request without an answer of this kind
    metrics: tuple[MetricSpec, ...]  # the task metrics a kind's grades are scored by
    compare: Callable[[Any, Any], tuple[Values, list[str]]]  # baseline record values vs current ones
    to_json: Callable[[Any], Any]  # parser values as cosmos-reasoner-parse prints them
    dump: Callable[[Any], Any]  # record values as results.jsonl holds them
    load: Callable[[Any], Any]  # ... and back
    # Record values from parser values, in the image of one camera: (values, camera, width, height).
    held: Callable[[Any, str, int, int], Any] = _identity
    # A label's values as the report shows them, where they say more than its answer text (a choice's letter).
    show: Callable[[Any], str] | None = None
    structured: bool = True  # a JSON answer read whole (completeness), its <think>/<answer> blocks closed
    extra_metrics: tuple[MetricSpec, ...] = ()  # scored where present (points: metres, with depth)
    compare_checks: tuple[CompareCheck, ...] = ()
    timed: bool = False  # answers in times of the clip: frames go to the model with their times
    path: bool = False  # answers are a path in the image: the Nav2 handoff follows it, and it is graded
    free_text: bool = False  # answers in words: a judge model may compare meanings

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
