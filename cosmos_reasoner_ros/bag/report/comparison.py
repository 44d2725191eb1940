"""The report's comparison parts: the verdict (every exceeded tolerance), the baseline and the run side by
side (aggregate figures and request by request, differing frames with both answers drawn), plots of the
differences, and a sweep's runs side by side."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from cosmos_reasoner_ros.bag.judge.compare import Check, RequestVerdict, RunStats, Verdict
from cosmos_reasoner_ros.bag.records import ResultRecord

__all__ = ["SweepColumn", "comparison_plots", "comparison_section", "sweep_page", "verdict_section"]


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _src(relative: str) -> str:
    return _e(quote(relative))


def _short(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " …"


def verdict_section(verdict: Verdict, baseline: str = "") -> str:
    """PASS or FAIL, what was compared with what, and every exceeded tolerance."""
    failed = verdict.failed_checks
    head = "PASS" if verdict.passed else f"FAIL ({len(failed)} exceeded)"
    against = f" against the baseline <code>{_e(baseline)}</code>" if baseline else ""
    items = "".join(f"<li>{_e(where)}: {_e(c.describe())}</li>" for where, c in failed)
    return (
        f"<div class='verdict {'pass' if verdict.passed else 'fail'}' id='verdict'><h2>{head}</h2>"
        f"<p>{len(verdict.requests)} requests and {len(verdict.aggregate)} aggregate checks{against}. "
        f"Latency gate: {_e(verdict.latency_gate or 'off')}.</p>"
        f"<ul>{items}</ul></div>"
    )


def _stats_rows(base: RunStats, cur: RunStats, checks: Sequence[Check]) -> str:
    limits = {c.name: c for c in checks}
    rows = [
        ("requests", base.requests, cur.requests, "unmatched_requests"),
        ("success rate", f"{base.success_rate:.0%}", f"{cur.success_rate:.0%}", "success_rate_vs_baseline"),
        ("parse rate", f"{base.parse_rate:.0%}", f"{cur.parse_rate:.0%}", "parse_rate_vs_baseline"),
        ("latency p50 [s]", f"{base.latency_p50_s:.3f}", f"{cur.latency_p50_s:.3f}", "latency_p50"),
        ("latency p90 [s]", f"{base.latency_p90_s:.3f}", f"{cur.latency_p90_s:.3f}", ""),
        ("latency p95 [s]", f"{base.latency_p95_s:.3f}", f"{cur.latency_p95_s:.3f}", "latency_p95"),
        ("TTFT p50 [s]", f"{base.ttft_p50_s:.3f}", f"{cur.ttft_p50_s:.3f}", "ttft_p50"),
        ("TTFT p95 [s]", f"{base.ttft_p95_s:.3f}", f"{cur.ttft_p95_s:.3f}", "ttft_p95"),
        ("prompt tokens (mean)", f"{base.prompt_tokens_mean:.1f}", f"{cur.prompt_tokens_mean:.1f}", ""),
        (
            "completion tokens (mean)",
            f"{base.completion_tokens_mean:.1f}",
            f"{cur.completion_tokens_mean:.1f}",
            "completion_tokens_mean",
        ),
    ]
    out = []
    for name, b, c, check in rows:
        found = limits.get(check)
        limit = f"{found.op} {found.limit:.4g}" if found and isinstance(found.limit, float) else ""
        cls = "" if found is None else ("pass" if found.passed else "fail")
        out.append(
            f"<tr class='{cls}'><td>{_e(name)}</td><td>{_e(b)}</td><td>{_e(c)}</td><td>{_e(limit)}</td></tr>"
        )
    return "".join(out)


def _request_row(n: int, r: RequestVerdict, image: str) -> str:
    def side(rec: ResultRecord | None) -> str:
        if rec is None:
            return "—"
        text = rec.answer if rec.success else f"[{rec.outcome}] {rec.error}"
        return f"{_e(rec.outcome)} · {rec.latency_s:.3f} s\n{_e(_short(text))}"

    metrics = "<br>".join(f"{_e(k)} {v:.3g}" for k, v in sorted(r.metrics.items()))
    checks = "<br>".join(_e(c.describe()) for c in r.checks) + "".join(
        f"<br><i>{_e(n_)}</i>" for n_ in r.notes
    )
    picture = f"<a href='{_src(image)}'><img src='{_src(image)}' alt='difference {n}'></a>" if image else ""
    cls = "pass" if r.passed else "fail"
    return (
        f"<tr class='{cls}' id='cmp{n}'><td>{n}</td><td>{_e(r.name)}</td><td>{side(r.baseline)}</td>"
        f"<td>{side(r.current)}</td><td>{metrics}</td><td>{checks}</td><td class='diff'>{picture}</td></tr>"
    )


def comparison_section(verdict: Verdict, difference_images: Mapping[int, str], plots: Sequence[str]) -> str:
    """Baseline and run side by side; `difference_images[i]` is the drawn frame of verdict.requests[i];
    `plots` are paths relative to the report folder."""
    if verdict.baseline_stats is None:
        return ""
    stats = _stats_rows(verdict.baseline_stats, verdict.stats, verdict.aggregate)
    rows = "".join(
        _request_row(i + 1, r, difference_images.get(i, "")) for i, r in enumerate(verdict.requests)
    )
    imgs = "".join(f"<img src='{_src(p)}' alt='{_e(Path(p).stem)}'>" for p in plots)
    return f"""<h2 id='comparison'>Baseline and this run side by side</h2>
<table><tr><th></th><th>baseline</th><th>this run</th><th>limit</th></tr>{stats}</table>
<div class='plots'>{imgs}</div>
<table class='side'><tr><th>#</th><th>request</th><th>baseline</th><th>this run</th><th>agreement</th>
<th>checks</th><th>frame (both answers)</th></tr>{rows}</table>"""


def comparison_plots(verdict: Verdict, out_dir: Path) -> tuple[Path, ...]:
    """compare_latency.png (baseline vs current latency per request) and compare_agreement.png (each
    agreement metric per request)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    pairs = [r for r in verdict.requests if r.baseline is not None and r.current is not None]
    both = [
        r
        for r in pairs
        if r.baseline is not None and r.baseline.success and r.current is not None and r.current.success
    ]
    fig, ax = plt.subplots(figsize=(5, 4.2))
    if both:
        xs = [r.baseline.latency_s for r in both if r.baseline is not None]
        ys = [r.current.latency_s for r in both if r.current is not None]
        ax.scatter(xs, ys, c=["#55a868" if r.passed else "#c44e52" for r in both], s=18)
        top = max(max(xs), max(ys)) * 1.1 or 1.0
        ax.plot([0, top], [0, top], color="#888", lw=0.8)
        ax.set(xlim=(0, top), ylim=(0, top))
    else:
        ax.text(
            0.5, 0.5, "no request succeeded in both runs", ha="center", va="center", transform=ax.transAxes
        )
    ax.set(title="Latency per request", xlabel="baseline [s]", ylabel="this run [s]")
    fig.tight_layout()
    latency = out_dir / "compare_latency.png"
    fig.savefig(latency, dpi=90)
    plt.close(fig)

    names = [
        ("trajectory_mean_px", "trajectory mean [px]"),
        ("trajectory_frechet_px", "trajectory Fréchet [px]"),
        ("box_iou_min", "box IoU"),
        ("segment_iou_min", "segment tIoU"),
        ("text_similarity", "text similarity"),
    ]
    shown = [(k, label) for k, label in names if any(k in r.metrics for r in pairs)]
    fig, axes = plt.subplots(max(1, len(shown)), 1, figsize=(8, 1.9 * max(1, len(shown))), squeeze=False)
    for (key, label), ax in zip(shown, axes[:, 0], strict=False):
        idx = [i + 1 for i, r in enumerate(verdict.requests) if key in r.metrics]
        vals = [min(r.metrics[key], 1e6) for r in verdict.requests if key in r.metrics]
        ax.bar(idx, vals, color="#4c72b0")
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
    if not shown:
        axes[0, 0].text(
            0.5, 0.5, "no answers to compare", ha="center", va="center", transform=axes[0, 0].transAxes
        )
    axes[-1, 0].set_xlabel("request #")
    fig.suptitle("Agreement with the baseline, per request")
    fig.tight_layout()
    agreement = out_dir / "compare_agreement.png"
    fig.savefig(agreement, dpi=90)
    plt.close(fig)
    return latency, agreement


@dataclass(frozen=True)
class SweepColumn:
    """One value of a swept parameter: its run's folder (relative to the sweep page) and verdict."""

    value: str
    folder: str
    verdict: Verdict


def sweep_page(out: Path, title: str, parameter: str, columns: Sequence[SweepColumn]) -> Path:
    """index.html with the sweep's runs side by side: figures per value, then each request's answer per
    value."""

    def cell(text: str) -> str:
        return f"<td>{_e(text)}</td>"

    head = "".join(
        f"<th><a href='{_src(c.folder + '/index.html')}'>{_e(parameter)} = {_e(c.value)}</a></th>"
        for c in columns
    )
    figures: list[tuple[str, Callable[[Verdict], str]]] = [
        ("verdict", lambda v: "PASS" if v.passed else f"FAIL ({len(v.failed_checks)})"),
        ("requests", lambda v: str(v.stats.requests)),
        ("success rate", lambda v: f"{v.stats.success_rate:.0%}"),
        ("parse rate", lambda v: f"{v.stats.parse_rate:.0%}"),
        ("latency p50 [s]", lambda v: f"{v.stats.latency_p50_s:.3f}"),
        ("latency p95 [s]", lambda v: f"{v.stats.latency_p95_s:.3f}"),
        ("TTFT p50 [s]", lambda v: f"{v.stats.ttft_p50_s:.3f}"),
        ("completion tokens (mean)", lambda v: f"{v.stats.completion_tokens_mean:.1f}"),
    ]
    rows = "".join(
        f"<tr><th>{_e(name)}</th>{''.join(cell(f(c.verdict)) for c in columns)}</tr>" for name, f in figures
    )
    names: list[str] = []
    answers: dict[str, dict[int, str]] = {}
    for k, c in enumerate(columns):
        for r in c.verdict.requests:
            if r.current is None:
                continue
            if r.name not in answers:
                names.append(r.name)
                answers[r.name] = {}
            rec = r.current
            answers[r.name][k] = f"{rec.outcome}: {_short(rec.answer if rec.success else rec.error, 160)}"
    per_request = "".join(
        f"<tr><th>{_e(n)}</th>{''.join(cell(answers[n].get(k, '—')) for k in range(len(columns)))}</tr>"
        for n in names
    )
    from cosmos_reasoner_ros.bag.report.html import STYLE

    page = f"""<!DOCTYPE html>
<html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title><style>{STYLE}</style></head>
<body><h1>{_e(title)}</h1>
<p>The same scenario once per value of <code>{_e(parameter)}</code>; each column links to its own report.</p>
<table class='side'><tr><th></th>{head}</tr>{rows}</table>
<h2>Requests</h2>
<table class='side'><tr><th>request</th>{head}</tr>{per_request}</table>
</body></html>
"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
