"""Every score metric against values computed by hand, and against independent oracles on generated answers:
box IoU by counting grid cells, temporal IoU by counting time steps, point displacement by explicit loops, the
discrete Fréchet distance by its recursive definition."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.labelled import boxes_text, failed, points_text, record, segments_text

from cosmos_reasoner_ros.bag.labels import bind_labels, labels_from_text
from cosmos_reasoner_ros.bag.scores import ScoreOptions, grade, score_run

W, H = 640, 480


def label(task: str, answer: str | list[str], tolerances: str = "", **keys: str) -> object:
    answers = answer if isinstance(answer, list) else [answer]
    extra = "".join(f", {k}: {v!r}" for k, v in keys.items())
    tol = f", tolerances: {{{tolerances}}}" if tolerances else ""
    listed = ", ".join(repr(a) for a in answers)
    return labels_from_text(f"labels: [{{task: {task}, at: 1, answers: [{listed}]{tol}{extra}}}]").labels[0]


def values(
    task: str, kind: str, answer: str, truth: str | list[str], tolerances: str = ""
) -> dict[str, float]:
    return grade(0, record(task, 1.0, answer, kind), label(task, truth, tolerances)).values  # type: ignore[arg-type]


def test_boxes_by_hand() -> None:
    v = values("grounding_2d", "boxes", boxes_text([(50, 50, 150, 150)]), boxes_text([(0, 0, 100, 100)]))
    assert v["iou"] == pytest.approx(2500 / 17500) and v["iou50"] == 0.0
    loose = values(
        "grounding_2d",
        "boxes",
        boxes_text([(50, 50, 150, 150)]),
        boxes_text([(0, 0, 100, 100)]),
        "iou_min: 0.1",
    )
    assert loose["iou50"] == 1.0
    # two labelled boxes, one answered exactly: the unanswered one counts 0
    two = values(
        "grounding_2d",
        "boxes",
        boxes_text([(0, 0, 100, 100)]),
        boxes_text([(0, 0, 100, 100), (500, 500, 600, 600)]),
    )
    assert two["iou"] == pytest.approx(0.5) and two["iou50"] == 1.0


def test_points_by_hand() -> None:
    truth = points_text([(0, 0), (500, 0), (500, 500)])
    v = values("trajectory", "points", points_text([(100, 0), (600, 0), (600, 500)]), truth)
    assert (v["ade_px"], v["fde_px"], v["frechet_px"]) == pytest.approx((64.0, 64.0, 64.0))  # 100/1000 * 640
    # the same path with a point more: resampled along its length, no displacement; the Fréchet leash must
    # reach from the answer's middle point to an end of the label's: half the 640 px width
    v = values(
        "trajectory", "points", points_text([(0, 0), (500, 0), (1000, 0)]), points_text([(0, 0), (1000, 0)])
    )
    assert (v["ade_px"], v["fde_px"], v["frechet_px"]) == pytest.approx((0.0, 0.0, 320.0))
    # y is scaled by the height: 100 / 1000 * 480
    v = values("trajectory", "points", points_text([(0, 100)]), points_text([(0, 0)]))
    assert (v["ade_px"], v["fde_px"]) == pytest.approx((48.0, 48.0))
    # several acceptable answers: the nearest one counts
    v = values(
        "trajectory", "points", points_text([(0, 100)]), [points_text([(900, 900)]), points_text([(0, 0)])]
    )
    assert v["ade_px"] == pytest.approx(48.0)


def test_segments_text_and_choice_by_hand() -> None:
    v = values("temporal_localization", "segments", segments_text([(2, 4)]), segments_text([(1, 3)]))
    assert v["tiou"] == pytest.approx(1 / 3) and v["tiou50"] == 0.0
    v = values("temporal_localization", "segments", segments_text([(1, 3), (5, 6)]), segments_text([(1, 3)]))
    assert v["tiou"] == pytest.approx(0.5)  # the extra answered event is unpaired: 0
    same = values("next_action", "text", "put the Bottle in the box!", "Put the bottle in the box.")
    assert same == {**same, "similarity": 1.0, "match": 1.0}
    near = values("next_action", "text", "Put the bottle into the box", "Put the bottle in the box")
    assert near["similarity"] == pytest.approx(10 / 12) and near["match"] == 1.0  # 5 of 6 words, default 0.8
    strict = values(
        "next_action", "text", "Put the bottle into the box", "Put the bottle in the box", "match_min: 0.9"
    )
    assert strict["match"] == 0.0
    assert values("plausibility", "choice", "(B) it falls", "A")["accuracy"] == 0.0
    assert values("plausibility", "choice", "Answer: B", ["A", "B"])["accuracy"] == 1.0


def test_a_task_over_its_requests_by_hand() -> None:
    labels = labels_from_text(
        "labels:\n"
        "  - {task: trajectory, between: [0, 10], answer: '[[0, 0], [500, 0]]'}\n"
        "  - {task: plausibility, between: [0, 10], answer: A}\n"
    )
    records = [
        record("trajectory", 1.0, points_text([(100, 0), (600, 0)]), "points", latency_s=0.1, tokens=10),
        record("trajectory", 2.0, points_text([(0, 0), (500, 0)]), "points", latency_s=0.2, tokens=20),
        record("trajectory", 3.0, points_text([(0, 0), (500, 0)]), "points", latency_s=0.4, tokens=30),
        failed("trajectory", 4.0),
        record("plausibility", 1.0, "A", "choice", latency_s=0.3),
        record("plausibility", 2.0, "B", "choice", latency_s=0.3),
        failed("plausibility", 3.0, "unparseable"),
    ]
    scores = score_run(records, bind_labels([labels], ["robot"]), ScoreOptions())
    t = scores.tasks["trajectory"]
    assert t.n == 4
    assert t.metrics["ade_px"].value == pytest.approx(64 / 3)  # over the three answered
    assert t.metrics["answered"].value == pytest.approx(0.75)
    assert t.metrics["latency_p50_s"].value == pytest.approx(0.2)  # nearest rank of 0.1, 0.2, 0.4
    assert t.metrics["latency_p95_s"].value == pytest.approx(0.4)
    assert t.metrics["completion_tokens"].value == pytest.approx(20.0)
    assert list(t.metrics) == [
        "ade_px",
        "fde_px",
        "frechet_px",
        "answered",
        "latency_p50_s",
        "latency_p95_s",
        "completion_tokens",
    ]
    c = scores.tasks["plausibility"]
    assert c.n == 3 and c.metrics["accuracy"].value == pytest.approx(1 / 3)
    for interval in (*t.metrics.values(), *c.metrics.values()):  # 3 or 4 answers: values, no intervals
        assert interval.value is not None and interval.low is None and interval.high is None
        assert interval.too_few
    grades = {g.position: g for g in scores.grades}
    assert grades[3].notes == ("not answered: timeout",) and math.isnan(grades[3].values["ade_px"])


# ---- oracles on generated answers ----

grid = st.integers(0, 40)


def raster_box(b: tuple[int, int, int, int]) -> np.ndarray:
    mask = np.zeros((40, 40), dtype=bool)
    mask[min(b[1], b[3]) : max(b[1], b[3]), min(b[0], b[2]) : max(b[0], b[2])] = True
    return mask


@settings(max_examples=300, deadline=None)
@given(st.tuples(grid, grid, grid, grid), st.tuples(grid, grid, grid, grid))
@example((0, 0, 10, 10), (10, 10, 20, 20))  # touching corners: no overlap
@example((5, 5, 1, 1), (1, 1, 5, 5))  # corners given swapped: the parser orders them
def test_box_iou_equals_counted_cells(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> None:
    if a[0] == a[2] or a[1] == a[3] or b[0] == b[2] or b[1] == b[3]:
        return  # a box without area is refused by the parser (tested there)
    v = values("grounding_2d", "boxes", boxes_text([a]), boxes_text([b]))  # type: ignore[list-item]
    ra, rb = raster_box(a), raster_box(b)
    assert v["iou"] == pytest.approx((ra & rb).sum() / (ra | rb).sum())


@settings(max_examples=300, deadline=None)
@given(st.tuples(st.integers(0, 40), st.integers(1, 20)), st.tuples(st.integers(0, 40), st.integers(1, 20)))
def test_temporal_iou_equals_counted_steps(a: tuple[int, int], b: tuple[int, int]) -> None:
    sa, sb = (a[0] / 2, (a[0] + a[1]) / 2), (b[0] / 2, (b[0] + b[1]) / 2)  # half-second steps
    v = values("temporal_localization", "segments", segments_text([sa]), segments_text([sb]))
    steps = np.arange(0, 60, 0.5) + 0.25  # the middle of each half-second step
    ia, ib = (steps > sa[0]) & (steps < sa[1]), (steps > sb[0]) & (steps < sb[1])
    assert v["tiou"] == pytest.approx((ia & ib).sum() / (ia | ib).sum())


def frechet_oracle(p: list[tuple[float, float]], q: list[tuple[float, float]]) -> float:
    @functools.cache
    def c(i: int, j: int) -> float:
        d = math.dist(p[i], q[j])
        if i == 0 and j == 0:
            return d
        if i == 0:
            return max(c(0, j - 1), d)
        if j == 0:
            return max(c(i - 1, 0), d)
        return max(min(c(i - 1, j), c(i - 1, j - 1), c(i, j - 1)), d)

    return c(len(p) - 1, len(q) - 1)


coordinate = st.integers(0, 1000)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(1, 7))
def test_displacements_and_frechet_equal_their_definitions(data: st.DataObject, n: int) -> None:
    answer = data.draw(st.lists(st.tuples(coordinate, coordinate), min_size=n, max_size=n))
    truth = data.draw(st.lists(st.tuples(coordinate, coordinate), min_size=n, max_size=n))
    v = values("trajectory", "points", points_text(answer), points_text(truth))
    pa = [(x * W / 1000, y * H / 1000) for x, y in answer]
    pt = [(x * W / 1000, y * H / 1000) for x, y in truth]
    distances = [math.dist(a, t) for a, t in zip(pa, pt, strict=True)]
    assert v["ade_px"] == pytest.approx(sum(distances) / n, abs=1e-6)
    assert v["fde_px"] == pytest.approx(distances[-1], abs=1e-6)
    assert v["frechet_px"] == pytest.approx(frechet_oracle(pa, pt), abs=1e-6)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(coordinate, coordinate), min_size=1, max_size=6),
    st.lists(st.tuples(coordinate, coordinate), min_size=1, max_size=6),
)
def test_frechet_of_different_lengths_equals_its_definition(
    answer: list[tuple[int, int]], truth: list[tuple[int, int]]
) -> None:
    v = values("trajectory", "points", points_text(answer), points_text(truth))
    pa = [(x * W / 1000, y * H / 1000) for x, y in answer]
    pt = [(x * W / 1000, y * H / 1000) for x, y in truth]
    assert v["frechet_px"] == pytest.approx(frechet_oracle(pa, pt), abs=1e-6)
    assert v["fde_px"] == pytest.approx(math.dist(pa[-1], pt[-1]), abs=1e-6)
    assert v["ade_px"] <= max(max(math.dist(a, b) for a in pa for b in pt), 0.0) + 1e-6
