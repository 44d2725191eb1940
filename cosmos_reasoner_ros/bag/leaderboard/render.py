"""A leaderboard written out: leaderboard.json (`{"runs": [{"run": DIR, "tasks": {...as in scores.json}}]}`
and the columns' marks), leaderboard.html (every name escaped) and leaderboard.md."""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from cosmos_reasoner_ros.bag.leaderboard.table import Column, Leaderboard, RunScores
from cosmos_reasoner_ros.bag.scores import METRICS, MIN_N, TOO_FEW, Interval, tasks_json

__all__ = ["LeaderboardFiles", "leaderboard_json", "leaderboard_markdown", "write_leaderboard"]

_BEST = "★"
_TIED = "≈"


@dataclass(frozen=True)
class LeaderboardFiles:
    json: Path
    html: Path
    markdown: Path


def _fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "–"
    unit = METRICS[metric].unit if metric in METRICS else ""
    if unit == "px" or metric == "completion_tokens":
        return f"{value:.1f}"
    if unit in ("m", "s"):
        return f"{value:.3f}"
    return f"{value:.2f}"


def _bounds(metric: str, cell: Interval) -> str:
    """The interval, or why there is none."""
    if cell.too_few:
        return f"({TOO_FEW}: {cell.n})"
    if cell.low is None or cell.high is None:
        return f"({cell.note or 'no interval'})"
    return f"[{_fmt(metric, cell.low)}, {_fmt(metric, cell.high)}]"


def _interval(metric: str, cell: Interval | None) -> str:
    if cell is None or cell.value is None:
        return "–"
    return f"{_fmt(metric, cell.value)} {_bounds(metric, cell)}"


def _marks(column: Column, row: int) -> str:
    marks = ""
    if row in column.best:
        marks += _BEST
    if row in column.not_significant:
        marks += _TIED
    return marks


def leaderboard_json(board: Leaderboard, confidence: float = 0.95) -> dict[str, object]:
    names = [r.name for r in board.runs]
    return {
        "runs": [{"run": r.name, "tasks": tasks_json(r.tasks)} for r in board.runs],
        "columns": [
            {
                "task": c.task,
                "metric": c.metric,
                "better": c.better,
                "best": [names[i] for i in c.best],
                "not_significant": [names[i] for i in c.not_significant],
                "too_few": [names[i] for i in c.too_few],
            }
            for c in board.columns
        ],
        "confidence": confidence,
        "min_n": MIN_N,
    }


_LEGEND = (
    f"{_BEST} best in the column; {_TIED} not significantly different from the best (the 95 % intervals "
    "overlap). Values are the metric over a task's labelled requests, [low, high] its 95 % interval (Wilson "
    "for shares, Student's t for means, order statistics for percentiles); a value from fewer than "
    f"{MIN_N} answers has no interval and is not ranked ({TOO_FEW}). Higher is better for shares (accuracy, "
    "IoU, match), lower for distances, latency; tokens are not ranked."
)


def _header(metric: str) -> str:
    spec = METRICS.get(metric)
    arrow = {"higher": " ↑", "lower": " ↓"}.get(spec.better if spec else "", "")
    unit = f" [{spec.unit}]" if spec and spec.unit else ""
    return f"{metric}{unit}{arrow}"


def _md(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def leaderboard_markdown(board: Leaderboard, title: str) -> str:
    lines = [f"# {_md(title)}", "", _LEGEND, ""]
    for task in board.tasks:
        columns = [c for c in board.columns if c.task == task]
        lines += [f"## {_md(task)}", ""]
        lines.append("| run | n | " + " | ".join(_header(c.metric) for c in columns) + " |")
        lines.append("| --- | ---: |" + " ---: |" * len(columns))
        for row, run in enumerate(board.runs):
            scores = run.tasks.get(task)
            cells = [
                f"{_interval(c.metric, c.cell(board.runs, row))} {_marks(c, row)}".strip() for c in columns
            ]
            n = str(scores.n) if scores is not None else "–"
            lines.append(f"| {_md(run.name)} | {n} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


_STYLE = """body{font-family:sans-serif;margin:1.5em;background:#fafafa}
table{border-collapse:collapse;margin:.5em 0;background:#fff}td,th{border:1px solid #ccc;padding:3px 8px}
td{text-align:right;white-space:nowrap}td.run{text-align:left}.best{background:#e3f4e3;font-weight:bold}
.ns{color:#777}.iv{font-size:85%;color:#555}"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _html(board: Leaderboard, title: str) -> str:
    tasks = board.tasks
    top = "".join(f"<th colspan='{1 + sum(c.task == t for c in board.columns)}'>{_e(t)}</th>" for t in tasks)
    sub = "".join(
        "<th>n</th>" + "".join(f"<th>{_e(_header(c.metric))}</th>" for c in board.columns if c.task == t)
        for t in tasks
    )
    rows = []
    for row, run in enumerate(board.runs):
        name = _e(run.name)
        link = f"<a href='{_e(quote(run.link))}'>{name}</a>" if run.link else name
        cells = [f"<td class='run'>{link}</td>"]
        for task in tasks:
            scores = run.tasks.get(task)
            cells.append(f"<td>{scores.n if scores is not None else '–'}</td>")
            for c in (c for c in board.columns if c.task == task):
                cell = c.cell(board.runs, row)
                if cell is None or cell.value is None:
                    cells.append("<td>–</td>")
                    continue
                classes = ("best" if row in c.best else "") + (" ns" if row in c.not_significant else "")
                marks = _marks(c, row)
                interval = _bounds(c.metric, cell)
                value = _fmt(c.metric, cell.value)
                span = f"<span class='iv'>{_e(interval)}</span>"
                cells.append(f"<td class='{classes.strip()}'>{_e(value)} {_e(marks)}<br>{span}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"""<!DOCTYPE html>
<html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title><style>{_STYLE}</style></head>
<body><h1>{_e(title)}</h1>
<p>{_e(_LEGEND)}</p>
<table><tr><th rowspan='2'>run</th>{top}</tr><tr>{sub}</tr>{"".join(rows)}</table>
</body></html>
"""


def _link(run: RunScores, out: Path) -> RunScores:
    index = Path(run.name) / "index.html"
    if run.link or not index.is_file():
        return run
    from dataclasses import replace

    return replace(run, link=Path(os.path.relpath(index.resolve(), out.resolve())).as_posix())


def write_leaderboard(
    board: Leaderboard, out: Path, title: str = "Leaderboard", confidence: float = 0.95
) -> LeaderboardFiles:
    """leaderboard.json, .html and .md in `out` (created); each run links to its report where it has one."""
    out.mkdir(parents=True, exist_ok=True)
    linked = Leaderboard(tuple(_link(r, out) for r in board.runs), board.columns)
    files = LeaderboardFiles(out / "leaderboard.json", out / "leaderboard.html", out / "leaderboard.md")
    files.json.write_text(
        json.dumps(leaderboard_json(board, confidence), indent=1, ensure_ascii=False), encoding="utf-8"
    )
    files.html.write_text(_html(linked, title), encoding="utf-8")
    files.markdown.write_text(leaderboard_markdown(board, title), encoding="utf-8")
    return files
