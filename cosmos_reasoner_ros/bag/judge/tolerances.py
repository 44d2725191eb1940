"""The tolerances of a regression run: the shipped config/tolerances.yaml, overridden by a user's file or a
scenario's block. Every key is known and typed: a misspelt key or a wrong type is a BagError naming it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.yaml_files import load_yaml
from cosmos_reasoner_ros.package_files import config_file

__all__ = ["AggregateTolerances", "RequestTolerances", "Tolerances", "load_tolerances"]


@dataclass(frozen=True)
class RequestTolerances:
    """Per-request checks; None switches a check off (see config/tolerances.yaml)."""

    new_failure: bool = True
    require_success: bool = False
    success_rate_min: float | None = 0.8  # of the task's requests, also without a baseline
    trajectory_mean_px: float | None = 40.0
    trajectory_max_px: float | None = 80.0
    trajectory_frechet_px: float | None = 80.0
    box_iou_min: float | None = 0.5
    segment_iou_min: float | None = 0.5
    choice_equal: bool = True
    text_similarity_min: float | None = None
    clip_frames_missing_max: int | None = 0  # frames a clip may lack against what the recording holds


@dataclass(frozen=True)
class AggregateTolerances:
    unmatched_max: int | None = 0
    success_rate_drop_max: float | None = 0.0
    parse_rate_drop_max: float | None = 0.0
    latency_p50_ratio_max: float | None = None
    latency_p95_ratio_max: float | None = None
    ttft_p50_ratio_max: float | None = None
    ttft_p95_ratio_max: float | None = None
    latency_slack_s: float = 0.05
    completion_tokens_ratio_max: float | None = 1.5
    success_rate_min: float | None = None
    latency_p95_max_s: float | None = None
    # camera frames the replayed node refused (undecodable, ...), all bags: each bag's bag_frames_refused
    # once (the node's own count), not the sum of the records' per-window frames_refused
    frames_refused_max: int | None = 0
    unverifiable_files_max: int | None = None  # storage files without CRCs; null: reported, not judged


@dataclass(frozen=True)
class Tolerances:
    per_request: RequestTolerances = RequestTolerances()
    tasks: Mapping[str, RequestTolerances] = field(default_factory=dict)  # per-task per_request
    aggregate: AggregateTolerances = AggregateTolerances()

    def for_task(self, task: str) -> RequestTolerances:
        return self.tasks.get(task, self.per_request)

    def latency_gate(self) -> str:
        """Which latency gates apply, in words (the report says it: a reader must know whether latency was
        judged at all)."""
        agg = self.aggregate
        ratios = [
            (name, value)
            for name, value in (
                ("latency p50", agg.latency_p50_ratio_max),
                ("latency p95", agg.latency_p95_ratio_max),
                ("TTFT p50", agg.ttft_p50_ratio_max),
                ("TTFT p95", agg.ttft_p95_ratio_max),
            )
            if value is not None
        ]
        parts = []
        if ratios:
            listed = ", ".join(f"{n} <= {v:g} x the baseline's" for n, v in ratios)
            parts.append(f"relative to the baseline ({listed}, + {agg.latency_slack_s:g} s)")
        if agg.latency_p95_max_s is not None:
            parts.append(f"absolute (latency p95 <= {agg.latency_p95_max_s:g} s)")
        return "; ".join(parts) if parts else "off (latency reported, not judged)"

    def judged(self) -> str:
        """What these tolerances judge and what they only report, in words (--help, the README): the one
        place that says it, from the values themselves."""
        pr, agg = self.per_request, self.aggregate
        judged = ["at least one successful request"]
        if pr.success_rate_min is not None:
            judged.append(f"each task's success rate >= {pr.success_rate_min:g}")
        if agg.success_rate_min is not None:
            judged.append(f"the run's success rate >= {agg.success_rate_min:g}")
        if pr.require_success:
            judged.append("every request succeeds")
        if pr.clip_frames_missing_max is not None:
            most = _most(pr.clip_frames_missing_max)
            judged.append(f"{most} frame missing from a clip (against the recording; in lock-step)")
        if agg.frames_refused_max is not None:
            most = _most(agg.frames_refused_max)
            judged.append(f"{most} camera frame refused by the node (undecodable, ...)")
        if agg.unverifiable_files_max is not None:
            judged.append(f"{_most(agg.unverifiable_files_max)} storage file without CRCs")
        if agg.latency_p95_max_s is not None:
            judged.append(f"latency p95 <= {agg.latency_p95_max_s:g} s")
        baseline = ["answers within the per-kind limits (trajectories, boxes, segments, choices)"]
        if pr.new_failure:
            baseline.insert(0, "a request that succeeded still succeeds")
        if agg.success_rate_drop_max is not None:
            baseline.append(f"a success rate at most {agg.success_rate_drop_max:g} below the baseline's")
        if agg.unmatched_max is not None:
            baseline.append(f"{_most(agg.unmatched_max)} request without a partner")
        reported = []
        if pr.text_similarity_min is None:
            reported.append("answer text similarity")
        if "off" in self.latency_gate():
            reported.append("latency and TTFT")
        if agg.unverifiable_files_max is None:
            reported.append("storage files without CRCs")
        return (
            f"judged: {'; '.join(judged)}; with --baseline also: {'; '.join(baseline)}. "
            f"Reported, not judged: {'; '.join(reported)}."
        )

    def merged(self, overrides: Mapping[str, Any], where: str) -> Tolerances:
        """These tolerances with the keys of a YAML mapping (config/tolerances.yaml's layout) replaced."""
        unknown = set(overrides) - {"per_request", "tasks", "aggregate"}
        if unknown:
            raise BagError(f"{where}: unknown tolerance section(s) {', '.join(sorted(unknown))}")
        per_request = _apply(self.per_request, overrides.get("per_request") or {}, f"{where}: per_request")
        # Task blocks start from this file's per_request (after its overrides), then their own keys.
        tasks = dict(self.tasks)
        task_blocks = overrides.get("tasks") or {}
        if not isinstance(task_blocks, Mapping):
            raise BagError(f"{where}: tasks must be a mapping of task name to per_request keys")
        for task, block in task_blocks.items():
            tasks[str(task)] = _apply(
                tasks.get(str(task), per_request), block or {}, f"{where}: tasks.{task}"
            )
        aggregate = _apply(self.aggregate, overrides.get("aggregate") or {}, f"{where}: aggregate")
        return Tolerances(per_request, tasks, aggregate)


def _most(n: int) -> str:
    return "no" if n == 0 else f"at most {n}"


def _apply(current: Any, block: Any, where: str) -> Any:
    if not isinstance(block, Mapping):
        raise BagError(f"{where} must be a mapping")
    known = {f.name: f for f in fields(current)}
    values: dict[str, Any] = {}
    for key, value in block.items():
        if key not in known:
            raise BagError(f"{where}: unknown key {key!r}; known: {', '.join(sorted(known))}")
        values[key] = _typed(value, getattr(current, key), str(known[key].type), f"{where}.{key}")
    return replace(current, **values)


def _typed(value: Any, default: Any, annotation: str, where: str) -> Any:
    optional = "None" in annotation
    if value is None:
        if not optional:
            raise BagError(f"{where} cannot be null")
        return None
    if annotation.startswith("bool"):
        if not isinstance(value, bool):
            raise BagError(f"{where} must be true or false, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BagError(f"{where} must be a number{' or null' if optional else ''}, got {value!r}")
    if not math.isfinite(float(value)) or value < 0:
        raise BagError(f"{where} must be a finite number >= 0, got {value!r}")
    return int(value) if annotation.startswith("int") else float(value)


def _read(path: Path) -> Mapping[str, Any]:
    data = load_yaml(path, "tolerances")
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise BagError(f"tolerances {path} must be a mapping")
    return data


def load_tolerances(path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> Tolerances:
    """The shipped defaults, then `path`'s keys, then `overrides` (a scenario's block)."""
    shipped = config_file("tolerances.yaml")
    tolerances = Tolerances().merged(_read(shipped), str(shipped))
    if path is not None:
        tolerances = tolerances.merged(_read(path), str(path))
    if overrides:
        tolerances = tolerances.merged(overrides, "scenario tolerances")
    return tolerances
