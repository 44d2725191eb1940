"""Agreement metrics between two answers: point distances along two paths, the discrete Fréchet distance,
dynamic time warping, box IoU, temporal IoU, a normalised text similarity; numpy only. The judge's percentile
is the package's one (percentiles.py)."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from cosmos_reasoner_ros.percentiles import percentile

if TYPE_CHECKING:
    from cosmos_reasoner_ros.reasoner import Segment

__all__ = [
    "box_iou",
    "discrete_frechet",
    "dtw_mean",
    "greedy_scores",
    "percentile",
    "point_distances",
    "segment_iou",
    "text_similarity",
]


def _polyline(points: Sequence[Sequence[float]]) -> np.ndarray:
    """The points as an (n, d) array: 2D pixels, or 3D points in metres (scores in metres with depth)."""
    array = np.asarray(points, dtype=float)
    return array.reshape(-1, array.shape[-1] if array.ndim == 2 else 2)


def _resample(path: np.ndarray, n: int) -> np.ndarray:
    """n points evenly spaced along the polyline (its own points when it already has n)."""
    if len(path) == n:
        return path
    if len(path) == 1:
        return np.repeat(path, n, axis=0)
    steps = np.linalg.norm(np.diff(path, axis=0), axis=1)
    along = np.concatenate([[0.0], np.cumsum(steps)])
    if along[-1] == 0.0:
        return np.repeat(path[:1], n, axis=0)
    at = np.linspace(0.0, along[-1], n)
    return np.stack([np.interp(at, along, path[:, k]) for k in range(path.shape[1])], axis=1)


def point_distances(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> np.ndarray:
    """Distances between corresponding points; paths of different lengths are both resampled along their
    length to the longer one's number of points."""
    pa, pb = _polyline(a), _polyline(b)
    if len(pa) == 0 or len(pb) == 0:
        raise ValueError("a trajectory without points")
    n = max(len(pa), len(pb))
    return np.asarray(np.linalg.norm(_resample(pa, n) - _resample(pb, n), axis=1))


def _cost(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> np.ndarray:
    pa, pb = _polyline(a), _polyline(b)
    if len(pa) == 0 or len(pb) == 0:
        raise ValueError("a trajectory without points")
    return np.asarray(np.linalg.norm(pa[:, None, :] - pb[None, :, :], axis=2))


def discrete_frechet(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> float:
    """The discrete Fréchet distance (Eiter and Mannila 1994): the shortest leash that lets two walkers go
    through both point sequences in order, each only forward."""
    d = _cost(a, b)
    n, m = d.shape
    ca = np.empty((n, m))
    for i in range(n):
        for j in range(m):
            if i == 0 and j == 0:
                best = 0.0
            elif i == 0:
                best = ca[0, j - 1]
            elif j == 0:
                best = ca[i - 1, 0]
            else:
                best = min(ca[i - 1, j], ca[i - 1, j - 1], ca[i, j - 1])
            ca[i, j] = max(best, d[i, j])
    return float(ca[-1, -1])


def dtw_mean(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Dynamic time warping cost divided by the warping path's length: the mean distance of aligned points."""
    d = _cost(a, b)
    n, m = d.shape
    acc = np.full((n + 1, m + 1), np.inf)
    steps = np.zeros((n + 1, m + 1), dtype=int)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            options = ((acc[i - 1, j], steps[i - 1, j]), (acc[i, j - 1], steps[i, j - 1]))
            best = min(((acc[i - 1, j - 1], steps[i - 1, j - 1]), *options), key=lambda o: o[0])
            acc[i, j] = best[0] + d[i - 1, j - 1]
            steps[i, j] = best[1] + 1
    return float(acc[n, m] / steps[n, m])


def box_iou(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """Intersection over union of two (x1, y1, x2, y2) boxes; 0 when either has no area."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def segment_iou(a: Segment, b: Segment) -> float:
    """Temporal IoU of two time segments; two instants at the same time count as 1."""
    inter = max(0.0, min(a.end_s, b.end_s) - max(a.start_s, b.start_s))
    union = max(a.end_s, b.end_s) - min(a.start_s, b.start_s)
    if union <= 0:
        return 1.0 if a.start_s == b.start_s else 0.0
    return inter / union


_PUNCT = re.compile(r"[^\w\s]")


def _words(text: str) -> list[str]:
    return _PUNCT.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split()


def text_similarity(a: str, b: str) -> float:
    """0-1: difflib's ratio of the two answers' word sequences after case folding, Unicode normalisation and
    removing punctuation (1: the same words in the same order)."""
    wa, wb = _words(a), _words(b)
    if not wa and not wb:
        return 1.0
    return difflib.SequenceMatcher(None, wa, wb, autojunk=False).ratio()


def greedy_scores(n: int, m: int, score: Callable[[int, int], float]) -> list[float]:
    """Pair items of two lists by the highest score first; one score per item of either list (unpaired: 0)."""
    pairs = sorted(((score(i, j), i, j) for i in range(n) for j in range(m)), reverse=True)
    used_a: set[int] = set()
    used_b: set[int] = set()
    scores = []
    for s, i, j in pairs:
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
            scores.append(s)
    return scores + [0.0] * ((n - len(used_a)) + (m - len(used_b)))
