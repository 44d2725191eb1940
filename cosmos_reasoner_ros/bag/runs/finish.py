"""A run's records to its report folder: annotated frames, results.jsonl, the verdict against the tolerances
(and the baseline, when given) as verdict.json, index.html with the comparison, and the short summary the
command line prints."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cosmos_reasoner_ros.bag.judge.compare import Verdict, judge
from cosmos_reasoner_ros.bag.judge.tolerances import Tolerances
from cosmos_reasoner_ros.bag.records import ResultRecord, write_records
from cosmos_reasoner_ros.bag.report.comparison import comparison_plots, comparison_section, verdict_section
from cosmos_reasoner_ros.bag.report.frames import (
    FrameIndex,
    annotated_frame,
    difference_frame,
    record_frame,
    save_image,
)
from cosmos_reasoner_ros.bag.report.html import BagRow, ReportFiles, bag_table, write_report
from cosmos_reasoner_ros.bag.runs.capped import capped
from cosmos_reasoner_ros.bag.runs.scoring import RunScoring, ScoredRun, score_lines
from cosmos_reasoner_ros.bag.safe_paths import printable, safe_name
from cosmos_reasoner_ros.bag.scores import GroundOf

__all__ = ["RunResult", "finish_run", "summary_lines"]


@dataclass(frozen=True)
class RunResult:
    records: tuple[ResultRecord, ...]
    verdict: Verdict
    files: ReportFiles
    out: Path
    scored: ScoredRun | None = None  # with labels: the scores (their thresholds are in the verdict)


def _annotate(
    records: Sequence[ResultRecord], out: Path, frames: Mapping[str, FrameIndex], image_format: str
) -> list[ResultRecord]:
    done = []
    for n, record in enumerate(records, start=1):
        frame = record_frame(frames, record)
        if frame is None:
            done.append(record)
            continue
        image = f"images/{n:04d}_{safe_name(record.task or 'request')}.{image_format}"
        save_image(annotated_frame(record, frame), out / image)
        done.append(replace(record, image=image))
    return done


def _verdict_json(verdict: Verdict, baseline: str) -> dict[str, object]:
    def check(c: object) -> dict[str, object]:
        return dict(vars(c))

    return {
        "passed": verdict.passed,
        "baseline": baseline,
        "latency_gate": verdict.latency_gate,
        "reasons": verdict.reasons,
        "requests": [
            {
                "name": r.name,
                "request_id": r.current.request_id if r.current else "",
                "passed": r.passed,
                "outcome": r.current.outcome if r.current else "",
                "metrics": r.metrics,
                "checks": [check(c) for c in r.checks],
                "notes": list(r.notes) + (list(r.current.notes) if r.current else []),
            }
            for r in verdict.requests
        ],
        "aggregate": [check(c) for c in verdict.aggregate],
        "stats": vars(verdict.stats),
        "baseline_stats": vars(verdict.baseline_stats) if verdict.baseline_stats else None,
    }


def finish_run(
    records: Sequence[ResultRecord],
    out: Path,
    frames: Mapping[str, FrameIndex],
    tolerances: Tolerances,
    baseline: Sequence[ResultRecord] | None = None,
    baseline_name: str = "",
    image_format: str = "jpg",
    title: str = "",
    bag_rows: Sequence[BagRow] = (),
    scoring: RunScoring | None = None,
    ground: GroundOf | None = None,
    kinds: Mapping[str, str] | None = None,
) -> RunResult:
    """frames: each bag's frames by the records' bag label (one entry serves records without a label).
    scoring: labels to score the records against (scores.json; thresholds join the aggregate checks).
    ground: where the rehearsed handoff's paths lie, to score them on the ground too (handoff_ground).
    kinds: task -> answer kind of the run's catalog (preflight.answer_kinds), to compare each task's answers
    with the baseline's by its own kind."""
    out.mkdir(parents=True, exist_ok=True)
    done = _annotate(records, out, frames, image_format)
    verdict = judge(done, tolerances, baseline, kinds)
    scored = scoring.apply(done, out, frames, image_format, ground=ground) if scoring is not None else None
    if scored is not None:
        verdict = replace(verdict, aggregate=(*verdict.aggregate, *scored.checks))
    differences = _difference_images(verdict, out, frames, image_format)
    write_records(done, out / "results.jsonl")
    (out / "verdict.json").write_text(
        json.dumps(_verdict_json(verdict, baseline_name), indent=1), encoding="utf-8"
    )
    sections = []
    has_checks = any(r.checks for r in verdict.requests) or bool(verdict.aggregate)
    if has_checks or baseline is not None:
        sections.append(verdict_section(verdict, baseline_name))
    if verdict.notes:
        items = "".join(f"<li>{html.escape(printable(n))}</li>" for n in verdict.notes)
        sections.append(f"<h2>What the recordings and clips lost</h2><ul class='lost'>{items}</ul>")
    if bag_rows and (len(bag_rows) > 1 or any(r.bag for r in done)):
        failed_by_bag: dict[str, int] = {}
        for r in verdict.requests:
            failed_by_bag[r.record.bag] = failed_by_bag.get(r.record.bag, 0) + sum(
                not c.passed for c in r.checks
            )
        rows = [replace(row, failed_checks=failed_by_bag.get(row.bag, 0)) for row in bag_rows]
        sections.append(bag_table(done, rows))
    if scored is not None:
        sections.append(scored.section)
    if baseline is not None:  # its plots go inside the comparison section, not beside the run's own
        compare_plots = comparison_plots(verdict, out / "plots")
        sections.append(
            comparison_section(verdict, differences, [p.relative_to(out).as_posix() for p in compare_plots])
        )
    files = write_report(
        done,
        out,
        printable(title) or f"Cosmos Reasoner evaluation ({len(done)} requests)",
        sections=sections,
        card_extras=_card_extras(verdict, done, differences, scored),
    )
    return RunResult(tuple(done), verdict, files, out, scored)


def _difference_images(
    verdict: Verdict, out: Path, frames: Mapping[str, FrameIndex], image_format: str
) -> dict[int, str]:
    """Per request that differs from its baseline and has a frame: the image of the difference, written under
    `out`, by the request's index in the verdict."""
    differences: dict[int, str] = {}
    for i, r in enumerate(verdict.requests):
        if r.differs and r.current is not None and r.baseline is not None:
            frame = record_frame(frames, r.current)
            if frame is not None:
                differences[i] = (
                    f"images/diff_{i + 1:04d}_{safe_name(r.current.task or 'request')}.{image_format}"
                )
                save_image(difference_frame(r.baseline, r.current, frame), out / differences[i])
    return differences


def _card_extras(
    verdict: Verdict, done: Sequence[ResultRecord], differences: Mapping[int, str], scored: ScoredRun | None
) -> dict[int, str]:
    """What each request's card shows beside its answer: exceeded checks, notes, the link to its comparison
    and the scores' extras, by the card's position (from 1)."""
    card_extras: dict[int, str] = {}
    position = {id(r): n for n, r in enumerate(done, start=1)}
    for i, r in enumerate(verdict.requests):
        if r.current is None or id(r.current) not in position:
            continue
        failed = [c.describe() for c in r.checks if not c.passed]
        parts = [f"<p class='err'>exceeded: {html.escape('; '.join(failed))}</p>"] if failed else []
        parts += [f"<p class='err'>{html.escape(printable(n))}</p>" for n in r.current.notes]
        if i in differences:
            parts.append(f"<p><a href='#cmp{i + 1}'>differs from the baseline</a></p>")
        card_extras[position[id(r.current)]] = "".join(parts)
    for n, extra in (scored.card_extras if scored is not None else {}).items():
        card_extras[n] = card_extras.get(n, "") + extra
    return card_extras


def summary_lines(result: RunResult, name: str = "", limit: int = 10) -> list[str]:
    """A few lines for stdout: what ran, how it went, the first exceeded tolerances, where the report is."""
    v, s = result.verdict, result.verdict.stats
    outcomes = ", ".join(f"{n} {k}" for k, n in s.outcomes.items()) or "no requests"
    bags = sorted({r.bag for r in result.records if r.bag})
    where = f"{name}: " if name else ""
    lines = [
        f"{where}{s.requests} requests{f' over {len(bags)} bags' if len(bags) > 1 else ''}: {outcomes}; "
        f"latency p50 {s.latency_p50_s:.3f} s, p95 {s.latency_p95_s:.3f} s"
    ]
    if v.baseline_stats is not None:
        lines.append(
            f"baseline: {v.baseline_stats.requests} requests, {v.unmatched_current} new and "
            f"{v.unmatched_baseline} missing; {sum(r.passed for r in v.requests)}/{len(v.requests)} "
            "within tolerance"
        )
    if v.latency_gate:
        lines.append(f"latency gate: {v.latency_gate}")
    if result.scored is not None:
        lines += score_lines(result.scored)
    failed = v.failed_checks
    lines.append("PASS" if v.passed else f"FAIL: {len(failed)} tolerance(s) exceeded")
    verdict_file = result.out / "verdict.json"
    exceeded = [f"  {where_}: {check.describe()}" for where_, check in failed]
    lines += capped(exceeded, limit, f"more (see {verdict_file})")
    lines += capped([f"  lost: {note}" for note in v.notes], limit, f"more losses (see {verdict_file})")
    lines.append(f"report: {result.files.index}")
    return lines
