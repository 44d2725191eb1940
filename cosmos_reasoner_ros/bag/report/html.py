"""`cosmos-reasoner-bag report`: one JSON line per request to an HTML page (annotated frame beside each
answer, all text escaped) and matplotlib plots (latency histogram and CDF, time to first
token, outcomes by kind)."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from cosmos_reasoner_ros.bag.records import ResultRecord, load_records, write_records
from cosmos_reasoner_ros.bag.safe_paths import printable

__all__ = [
    "BagRow",
    "ReportFiles",
    "ResultRecord",
    "Summary",
    "bag_table",
    "load_records",
    "write_records",
    "write_report",
]


@dataclass(frozen=True)
class Summary:
    requests: int
    outcomes: dict[str, int]
    latency_median_s: float
    latency_p95_s: float
    ttft_median_s: float

    @classmethod
    def of(cls, records: Sequence[ResultRecord]) -> Summary:
        """The run's figures as the verdict, stdout and JUnit give them (one percentile definition)."""
        from cosmos_reasoner_ros.bag.judge.compare import RunStats

        stats = RunStats.of(records)
        return cls(
            requests=stats.requests,
            outcomes=dict(Counter(r.outcome for r in records).most_common()),
            latency_median_s=stats.latency_p50_s,
            latency_p95_s=stats.latency_p95_s,
            ttft_median_s=stats.ttft_p50_s,
        )


@dataclass(frozen=True)
class ReportFiles:
    index: Path
    plots: tuple[Path, ...] = field(default_factory=tuple)


def write_plots(records: Sequence[ResultRecord], out_dir: Path) -> tuple[Path, ...]:
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    latencies = sorted(r.latency_s for r in records if r.success)
    fig, (hist, cdf) = plt.subplots(1, 2, figsize=(10, 3.8))
    if latencies:
        hist.hist(latencies, bins=min(30, max(5, len(latencies))), color="#4c72b0")
        cdf.step(latencies, [(i + 1) / len(latencies) for i in range(len(latencies))], where="post")
    hist.set(title="Latency (successful requests)", xlabel="latency [s]", ylabel="requests")
    cdf.set(title="Latency CDF", xlabel="latency [s]", ylabel="fraction", ylim=(0, 1.02))
    cdf.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(out_dir / "latency.png")
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)

    ttft = [r.ttft_s for r in records if r.success and r.ttft_s > 0]
    fig, ax = plt.subplots(figsize=(5, 3.8))
    if ttft:
        ax.hist(ttft, bins=min(30, max(5, len(ttft))), color="#55a868")
    else:
        ax.text(0.5, 0.5, "no streamed answers", ha="center", va="center", transform=ax.transAxes)
    ax.set(title="Time to first token", xlabel="TTFT [s]", ylabel="requests")
    fig.tight_layout()
    paths.append(out_dir / "ttft.png")
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)

    outcomes = Counter(r.outcome for r in records).most_common()
    fig, ax = plt.subplots(figsize=(5, 3.8))
    if outcomes:
        names = [k for k, _ in outcomes]
        ax.bar(
            names, [v for _, v in outcomes], color=["#55a868" if k == "success" else "#c44e52" for k in names]
        )
        ax.tick_params(axis="x", labelrotation=30)
    ax.set(title="Outcomes", ylabel="requests")
    fig.tight_layout()
    paths.append(out_dir / "outcomes.png")
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)
    return tuple(paths)


def _e(value: object) -> str:
    return html.escape(printable(str(value)), quote=True)


def _src(relative: str) -> str:
    return _e(quote(relative))


def _items(record: ResultRecord) -> str:
    rows = []
    for t in record.trajectories:
        pts = " ".join(f"({p.x_norm:.0f},{p.y_norm:.0f})" for p in t.trajectory.points)
        rows.append(f"<li>trajectory <b>{_e(t.label)}</b>: {_e(pts)}</li>")
    for b in record.boxes:
        norm = [b.box.x1_norm, b.box.y1_norm, b.box.x2_norm, b.box.y2_norm]
        rows.append(f"<li>box <b>{_e(b.label)}</b>: {_e(norm)}</li>")
    for s in record.segments:
        rows.append(f"<li>{_e(s.start_s)}-{_e(s.end_s)} s: {_e(s.caption)}</li>")
    return f"<ul class='items'>{''.join(rows)}</ul>" if rows else ""


def _handoff(record: ResultRecord) -> str:
    """The Nav2 handoff's decision (dry in a replay) and every gate's verdict, as a table."""
    h = record.handoff
    if h is None:
        return ""
    rows = "".join(
        f"<tr class='{'pass' if g.passed else 'fail'}'><td>{_e(g.name)}</td>"
        f"<td>{'pass' if g.passed else 'FAIL'}</td><td>{g.value:.3g}</td><td>{g.limit:.3g}</td>"
        f"<td>{_e(g.detail)}</td></tr>"
        for g in h.gates
    )
    path = (
        f" · {_e(h.source)} path of {h.length_m:.2f} m ({len(h.path)} poses) in {_e(h.frame_id)}"
        if h.path
        else ""
    )
    return (
        f"<details class='handoff' open><summary>handoff: <b>{_e(h.decision)}</b>"
        f"{' (dry run)' if h.dry_run else ''}{path}</summary><p>{_e(h.reason)}</p>"
        "<table><tr><th>gate</th><th></th><th>value</th><th>limit</th><th>detail</th></tr>"
        f"{rows}</table></details>"
    )


def provenance_text(r: ResultRecord) -> str:
    """The card's line on what the request's own clip window held: frames refused, out of order, not
    recorded or missing from the clip, and a stale clip; empty when none (or not known)."""
    parts = []
    for p in r.provenance:
        lost = [
            (len(p.refused_s), "refused"),
            (len(p.out_of_order_s), "out of order"),
            (p.missing, "not recorded"),
        ]
        said = ", ".join(f"{n} frame{'s' if n > 1 else ''} {what}" for n, what in lost if n)
        if said:
            window = f"{p.window_start_s:.2f}-{p.window_end_s:.2f} s"
            parts.append(f"{said} in this clip's window of {p.topic} ({window})")
    if r.frames_missing:
        parts.append(f"the clip has {r.clip_frames} of {r.frames_expected} frames expected")
    if r.clip_stale:
        parts.append(f"clip ends {r.clip_lag_s:.2f} s before its trigger")
    return "; ".join(parts)


def _provenance(r: ResultRecord) -> str:
    text = provenance_text(r)
    return f"<p class='provenance'>{_e(text)}</p>" if text else ""


def _damage_totals(records: Sequence[ResultRecord]) -> str:
    """The run's totals of the answers' provenance: the sum of the per-answer counts (a frame in two
    overlapping windows counts for each), beside the node's own count per bag (bag_frames_refused)."""
    if not any(r.provenance for r in records):  # none known: a file written before it, or no clip settings
        return ""
    in_windows = sum(r.frames_refused for r in records)
    damaged = sum(r.success and r.clip_damaged for r in records)
    stale = sum(r.clip_stale for r in records)
    by_node = sum({r.bag: r.bag_frames_refused for r in records}.values())
    return (
        f"<p class='provenance'>{in_windows} frames refused in the answers' clip windows (summed over "
        f"answers) · {by_node} refused by the node over the replays · {damaged} successful answers on a "
        f"damaged clip · {stale} stale clips</p>"
    )


def _card(n: int, r: ResultRecord, extra: str = "") -> str:
    image = (
        f"<a href='{_src(r.image)}'><img src='{_src(r.image)}' alt='request {n}' loading='eager'></a>"
        if r.image
        else "<div class='noimg'>no frame</div>"
    )
    if r.success and r.clip_damaged:
        status = "<span class='warn'>success on a damaged clip</span>"
    elif r.success:
        status = "<span class='ok'>success</span>"
    else:
        status = f"<span class='err'>{_e(r.outcome)}</span>: {_e(r.error)}"
    reasoning = (
        f"<details><summary>reasoning</summary><pre>{_e(r.reasoning)}</pre></details>" if r.reasoning else ""
    )
    return f"""<section class='card' id='r{n}'>
<div class='frame'>{image}</div>
<div class='text'>
<h2>#{n} {_e(r.task)} <small>{_e(r.bag + " · " if r.bag else "")}at {r.trigger_s:.2f} s ·
{_e(r.request_id)}</small></h2>
<p class='instruction'>{_e(r.instruction)}</p>
<p>{status} · latency {r.latency_s:.3f} s · TTFT {r.ttft_s:.3f} s · {r.clip_frames} frames ·
{r.prompt_tokens}+{r.completion_tokens} tokens · {_e(r.finish_reason)} · {_e(r.model)}</p>
{_provenance(r)}
<pre class='answer'>{_e(r.answer)}</pre>
{_items(r)}
{_handoff(r)}
{reasoning}
{extra}
</div>
</section>"""


STYLE = """body{font-family:sans-serif;margin:1.5em;background:#fafafa}
.card{display:flex;gap:1em;background:#fff;border:1px solid #ddd;margin:1em 0;padding:.8em}
.frame img{max-width:480px;height:auto}.text{flex:1;min-width:0}pre{white-space:pre-wrap}
.ok{color:#2a7a2a;font-weight:bold}.err{color:#b22;font-weight:bold}.warn{color:#a60;font-weight:bold}
.provenance{color:#a60}
.plots img{height:280px;width:auto;max-width:100%}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;vertical-align:top}
.pass{background:#e3f4e3}.fail{background:#f8e0e0}.diff img{max-width:640px;height:auto}
.side td{max-width:420px;white-space:pre-wrap}"""


@dataclass(frozen=True)
class BagRow:
    """One bag of a run, for the report's table."""

    bag: str
    wall_s: float = 0.0
    failed_checks: int = 0


def bag_table(records: Sequence[ResultRecord], rows: Sequence[BagRow]) -> str:
    """A row per bag: requests, outcomes, parse rate, latency and TTFT percentiles, tokens, wall time."""
    from cosmos_reasoner_ros.bag.judge.compare import RunStats

    body = []
    for row in rows:
        s = RunStats.of([r for r in records if r.bag == row.bag])
        cls = "fail" if row.failed_checks else "pass"
        body.append(
            f"<tr class='{cls}'><td>{_e(row.bag)}</td><td>{s.requests}</td><td>{s.succeeded}</td>"
            f"<td>{s.parse_rate:.0%}</td><td>{s.latency_p50_s:.3f}</td><td>{s.latency_p95_s:.3f}</td>"
            f"<td>{s.ttft_p50_s:.3f}</td><td>{s.completion_tokens_mean:.1f}</td><td>{row.wall_s:.1f}</td>"
            f"<td>{row.failed_checks}</td></tr>"
        )
    head = (
        "<tr><th>bag</th><th>requests</th><th>succeeded</th><th>parsed</th><th>latency p50 [s]</th>"
        "<th>p95 [s]</th><th>TTFT p50 [s]</th><th>completion tokens (mean)</th><th>wall [s]</th>"
        "<th>exceeded tolerances</th></tr>"
    )
    return f"<h2>Bags</h2><table class='bags'>{head}{''.join(body)}</table>"


def write_html(
    records: Sequence[ResultRecord],
    out_dir: Path,
    plots: Sequence[Path],
    title: str,
    sections: Sequence[str] = (),
    card_extras: Mapping[int, str] | None = None,
) -> Path:
    """The page; `sections` (HTML) go after the plots, `card_extras[n]` (HTML) into request n's card."""
    summary = Summary.of(records)
    outcome_rows = "".join(f"<tr><td>{_e(k)}</td><td>{v}</td></tr>" for k, v in summary.outcomes.items())
    plot_imgs = "".join(
        f"<img src='{_src(p.relative_to(out_dir).as_posix())}' alt='{_e(p.stem)}'>" for p in plots
    )
    extras = card_extras or {}
    cards = "\n".join(_card(n, r, extras.get(n, "")) for n, r in enumerate(records, start=1))
    page = f"""<!DOCTYPE html>
<html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title><style>{STYLE}</style></head>
<body><h1>{_e(title)}</h1>
<p>{summary.requests} requests · latency median {summary.latency_median_s:.3f} s, p95
{summary.latency_p95_s:.3f} s · TTFT median {summary.ttft_median_s:.3f} s</p>
<table><tr><th>outcome</th><th>requests</th></tr>{outcome_rows}</table>
{_damage_totals(records)}
<div class='plots'>{plot_imgs}</div>
{"".join(sections)}
{cards}
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def write_report(
    records: Sequence[ResultRecord],
    out_dir: Path,
    title: str = "Cosmos Reasoner evaluation",
    sections: Sequence[str] = (),
    card_extras: Mapping[int, str] | None = None,
) -> ReportFiles:
    """index.html and plots/*.png in `out_dir`; image paths in the records are relative to it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = write_plots(records, out_dir / "plots")
    return ReportFiles(write_html(records, out_dir, plots, title, sections, card_extras), plots)
