"""scores.json, the form scripts rely on: `{"tasks": {TASK: {"n": N, "metrics": {NAME: {"value": V, "low": L,
"high": H, "n": N, "note": WHY}}}}}` (null where a metric has no value or no interval; n the values it was
computed from; note why there is no interval), with the method and what was not scored beside it;
labelled.jsonl (one line per labelled request: its values and the label it was graded against) and judge.jsonl
(every question to the text judge and its reply). Reading a scores.json back checks that form."""

from __future__ import annotations

import json
import math
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.bag.scores.intervals import MIN_N, Interval
from cosmos_reasoner_ros.bag.scores.scoring import Scores, TaskScores, handoff_summary

__all__ = ["SCORES_FILE", "read_scores", "scores_json", "tasks_json", "write_scores"]

SCORES_FILE = "scores.json"
_MAX_BYTES = 64 * 1024 * 1024


def _number(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), 6)


def tasks_json(tasks: Mapping[str, TaskScores]) -> dict[str, Any]:
    return {
        task: {
            "n": scores.n,
            "metrics": {
                name: {
                    "value": _number(i.value),
                    "low": _number(i.low),
                    "high": _number(i.high),
                    "n": i.n,
                    "note": i.note,
                }
                for name, i in scores.metrics.items()
            },
        }
        for task, scores in tasks.items()
    }


def scores_json(scores: Scores, label_files: list[str]) -> dict[str, Any]:
    data: dict[str, Any] = {"tasks": tasks_json(scores.tasks)}
    data["confidence"] = scores.options.confidence
    data["intervals"] = {
        "shares": "wilson",
        "means": "student-t",
        "percentiles": "order-statistics",
        "min_n": MIN_N,
    }
    m = scores.matching
    data["labels"] = {
        "files": label_files,
        "labelled_requests": len(scores.grades),
        "not_scored": m.problems() if m is not None else [],
        "unlabelled_requests": dict(m.unlabelled) if m is not None else {},
    }
    handoff = handoff_summary(scores.grades)
    if handoff is not None:
        data["handoff"] = {
            "labelled_answers": handoff.answers,
            "paths_scored": handoff.paths,
            "on_the_ground": handoff.on_ground,
            "pixels_only": list(handoff.pixels_only),
        }
    if scores.judged:
        data["judge"] = {
            "model": scores.judge_model,
            "asked": len(scores.judged),
            "unjudged": sum(j.answer.same is None for j in scores.judged),
            "file": "judge.jsonl",
        }
    return data


def write_scores(scores: Scores, out: Path, records: list[ResultRecord], label_files: list[str]) -> Path:
    """scores.json, labelled.jsonl and (with a judge) judge.jsonl in `out`; the path of scores.json."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / SCORES_FILE
    path.write_text(
        json.dumps(scores_json(scores, label_files), indent=1, ensure_ascii=False), encoding="utf-8"
    )
    lines = []
    for g in scores.grades:
        r = records[g.position]
        lines.append(
            json.dumps(
                {
                    "request": g.position + 1,
                    "request_id": r.request_id,
                    "bag": r.bag,
                    "task": g.task,
                    "trigger_s": r.trigger_s,
                    "label": g.label.where,
                    "acceptable_answer": g.best,
                    "values": {k: _number(v) for k, v in g.values.items()},
                    "notes": list(g.notes),
                },
                ensure_ascii=False,
            )
        )
    (out / "labelled.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    if scores.judged:
        judged = [
            json.dumps(
                {
                    "request": j.position + 1,
                    "task": j.task,
                    "model": j.answer.model,
                    "prompt": j.answer.prompt,
                    "reply": j.answer.reply,
                    "same": j.answer.same,
                    "error": j.answer.error,
                },
                ensure_ascii=False,
            )
            for j in scores.judged
        ]
        (out / "judge.jsonl").write_text("".join(line + "\n" for line in judged), encoding="utf-8")
    return path


def _bad(path: Path, what: str) -> BagError:
    return BagError(f"{path} is not a scores file of cosmos-reasoner-bag ({what})")


_KEYS = {"value", "low", "high"}


def _interval(path: Path, value: Any, task_n: int) -> Interval:
    """A metric; one of a file written before issue 38 has no n (the task's n stands for it) and no note."""
    if not isinstance(value, Mapping) or not _KEYS <= set(value) <= _KEYS | {"n", "note"}:
        raise _bad(path, "a metric is not {value, low, high[, n, note]}")
    n, note = value.get("n", task_n), value.get("note", "")
    if (n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0)) or not isinstance(
        note, str
    ):
        raise _bad(path, "a metric's n is not a count or its note not a string")
    parts = []
    for key in ("value", "low", "high"):
        v = value[key]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise _bad(path, "a metric's value, low or high is not a number or null")
        parts.append(None if v is None else float(v))
    return Interval(parts[0], parts[1], parts[2], n, note)


def read_scores(path: Path) -> dict[str, TaskScores]:
    """The tasks of a scores.json (or of the run folder holding one); BagError when it is not one."""
    path = path / SCORES_FILE if path.is_dir() else path
    try:
        info = path.stat()
    except OSError as exc:
        raise BagError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_BYTES:
        raise _bad(path, "not a regular file of at most 64 MiB")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        raise _bad(path, "not JSON") from None
    tasks = data.get("tasks") if isinstance(data, Mapping) else None
    if not isinstance(tasks, Mapping):
        raise _bad(path, "no tasks mapping")
    out: dict[str, TaskScores] = {}
    for task, body in tasks.items():
        if not isinstance(body, Mapping) or set(body) != {"n", "metrics"}:
            raise _bad(path, "a task is not {n, metrics}")
        n, metrics = body["n"], body["metrics"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0 or not isinstance(metrics, Mapping):
            raise _bad(path, "a task's n is not a count or its metrics not a mapping")
        out[str(task)] = TaskScores(n, {str(k): _interval(path, v, n) for k, v in metrics.items()})
    return out
