"""A scenario's scoring keys: `labels:` (a labels file for its only bag, or a mapping of bag name to labels
file) and `min_scores:` (`task.metric: value`), read and checked when the scenario loads, before any run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels import LabelSet, bind_labels, load_labels
from cosmos_reasoner_ros.bag.replay.plan import bag_label
from cosmos_reasoner_ros.bag.scores import MinScore, parse_min_score

__all__ = ["scenario_labels", "scenario_min_scores"]


def scenario_labels(
    value: Any, bags: Sequence[Path], rel: Callable[[Any, str], Path], where: str
) -> tuple[LabelSet, ...]:
    if value is None:
        return ()
    names = [bag_label(b) for b in bags]
    sets: list[LabelSet] = []
    if isinstance(value, str):
        sets.append(load_labels(rel(value, "labels")))
    elif isinstance(value, Mapping):
        for bag, path in value.items():
            if str(bag) not in names:
                raise BagError(
                    f"{where}: labels: {str(bag)[:80]!r} is not a bag of the scenario ({', '.join(names)})"
                )
            labels = load_labels(rel(path, f"labels.{bag}"))
            if labels.bag and labels.bag != str(bag):
                raise BagError(f"{where}: labels.{bag}: the labels file {labels.source} is for another bag")
            sets.append(replace(labels, bag=str(bag)))
    else:
        raise BagError(f"{where}: labels must be a labels file, or a mapping of bag name to labels file")
    bind_labels(sets, names)
    return tuple(sets)


def scenario_min_scores(value: Any, where: str) -> tuple[MinScore, ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise BagError(f"{where}: min_scores must be a mapping of task.metric to a number")
    out = []
    for key, limit in value.items():
        if isinstance(limit, bool) or not isinstance(limit, (int, float)):
            raise BagError(f"{where}: min_scores.{str(key)[:80]} must be a number")
        out.append(parse_min_score(f"{key}={limit}", f"{where}: min_scores"))
    return tuple(out)
