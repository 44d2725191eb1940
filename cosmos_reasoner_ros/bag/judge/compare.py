"""A run against its tolerances and, when given, its baseline: requests matched by bag, task, instruction and
trigger time; answer agreement by answer kind (each kind's `compare` and `compare_checks`, reasoner.KINDS:
trajectories by point distances in pixels and the discrete Fréchet distance, boxes by IoU, time segments by
temporal IoU, choices by equality, text by a normalised similarity); success and parse rates, latency and TTFT
percentiles, tokens. Plain Python and numpy, no ROS."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cosmos_reasoner_ros.bag.judge.metrics import percentile
from cosmos_reasoner_ros.bag.judge.tolerances import RequestTolerances, Tolerances
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.reasoner import KINDS, TEXT, AnswerKind, CompareCheck, kind_of, slot_kinds

__all__ = [
    "Check",
    "RequestVerdict",
    "RunStats",
    "Verdict",
    "answer_metrics",
    "judge",
    "match_records",
    "request_key",
]

RequestKey = tuple[str, str, str, str, float]


# ------------------------------------------------------------------------------------------------ verdicts


@dataclass(frozen=True)
class Check:
    """One tolerance applied: `value` against `limit` (`op` "<=", ">=" or "=="); passed says the outcome."""

    name: str
    value: float | str
    limit: float | str
    op: str
    passed: bool
    unit: str = ""

    def describe(self) -> str:
        def fmt(v: float | str) -> str:
            return f"{v:.4g}" if isinstance(v, float) else str(v)

        verdict = "ok" if self.passed else "exceeded"
        limit = f"{self.op} {fmt(self.limit)}{self.unit}"
        return f"{self.name} {fmt(self.value)}{self.unit} (limit {limit}): {verdict}"


def _at_most(name: str, value: float, limit: float | None, unit: str = "") -> list[Check]:
    return [] if limit is None else [Check(name, value, limit, "<=", value <= limit + 1e-9, unit)]


def _at_least(name: str, value: float, limit: float | None, unit: str = "") -> list[Check]:
    return [] if limit is None else [Check(name, value, limit, ">=", value >= limit - 1e-9, unit)]


@dataclass(frozen=True)
class RequestVerdict:
    """One request of the run (or a baseline request without a partner: `current` None)."""

    current: ResultRecord | None
    baseline: ResultRecord | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def record(self) -> ResultRecord:
        record = self.current or self.baseline
        assert record is not None
        return record

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def differs(self) -> bool:
        """Both runs answered and the answers are not the same (what the report draws)."""
        b, c = self.baseline, self.current
        if b is None or c is None:
            return False
        return (b.success, b.answer, b.choice) != (c.success, c.answer, c.choice) or not self.passed

    @property
    def name(self) -> str:
        r = self.record
        bag = f"{r.bag} " if r.bag else ""
        what = f" {r.instruction}" if r.instruction else ""
        return f"{bag}t={r.trigger_s:.2f}s {r.task}{what}"


@dataclass(frozen=True)
class RunStats:
    """The figures of one run (or one bag of it)."""

    requests: int
    succeeded: int
    answered: int
    parsed: int
    outcomes: dict[str, int]
    latency_p50_s: float
    latency_p90_s: float
    latency_p95_s: float
    latency_max_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    prompt_tokens_mean: float
    completion_tokens_mean: float
    completion_tokens_total: int

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.requests if self.requests else 0.0

    @property
    def parse_rate(self) -> float:
        return self.parsed / self.answered if self.answered else 0.0

    @classmethod
    def of(cls, records: Sequence[ResultRecord]) -> RunStats:
        ok = [r for r in records if r.success]
        lat = [r.latency_s for r in ok]
        ttft = [r.ttft_s for r in ok if r.ttft_s > 0]
        answered = [r for r in records if r.answered]
        outcomes: dict[str, int] = defaultdict(int)
        for r in records:
            outcomes[r.outcome] += 1
        return cls(
            requests=len(records),
            succeeded=len(ok),
            answered=len(answered),
            parsed=sum(r.success for r in answered),
            outcomes=dict(sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0]))),
            latency_p50_s=percentile(lat, 0.5),
            latency_p90_s=percentile(lat, 0.9),
            latency_p95_s=percentile(lat, 0.95),
            latency_max_s=max(lat, default=0.0),
            ttft_p50_s=percentile(ttft, 0.5),
            ttft_p95_s=percentile(ttft, 0.95),
            prompt_tokens_mean=float(np.mean([r.prompt_tokens for r in ok])) if ok else 0.0,
            completion_tokens_mean=float(np.mean([r.completion_tokens for r in ok])) if ok else 0.0,
            completion_tokens_total=sum(r.completion_tokens for r in records),
        )


@dataclass(frozen=True)
class Verdict:
    """A run judged: one entry per request (and per unmatched baseline request), the aggregate checks."""

    requests: tuple[RequestVerdict, ...]
    aggregate: tuple[Check, ...]
    stats: RunStats
    baseline_stats: RunStats | None = None
    unmatched_current: int = 0
    unmatched_baseline: int = 0
    latency_gate: str = ""  # which latency gates applied, in words

    @property
    def notes(self) -> list[str]:
        """What the run's recordings and clips lost, in words (each once, with its bag): the reasons beside
        the checks, also when they are within tolerance."""
        seen: dict[str, None] = {}
        for r in self.requests:
            if r.current is not None:
                for note in r.current.bag_notes:
                    seen[f"{r.current.bag}: {note}" if r.current.bag else note] = None
        for r in self.requests:
            if r.current is not None:
                for note in r.current.notes:
                    seen[f"{r.name}: {note}"] = None
        return list(seen)

    @property
    def reasons(self) -> list[str]:
        """Why the run passed or failed: every exceeded tolerance, then what the recordings lost."""
        return [f"{where}: {c.describe()}" for where, c in self.failed_checks] + self.notes

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.requests) and all(c.passed for c in self.aggregate)

    @property
    def failed_checks(self) -> list[tuple[str, Check]]:
        """(where, check) of every exceeded tolerance: the request's name, or "aggregate"."""
        out = [(r.name, c) for r in self.requests for c in r.checks if not c.passed]
        return out + [("aggregate", c) for c in self.aggregate if not c.passed]


def request_key(r: ResultRecord) -> RequestKey:
    return (r.bag, r.task, r.instruction, r.step, round(r.trigger_s, 3))


def match_records(
    baseline: Sequence[ResultRecord], current: Sequence[ResultRecord]
) -> tuple[list[tuple[ResultRecord, ResultRecord]], list[ResultRecord], list[ResultRecord]]:
    """(pairs, current without a baseline partner, baseline without a current partner). Requests with the same
    key (the same goal twice at one time) pair in order."""
    waiting: dict[RequestKey, list[ResultRecord]] = defaultdict(list)
    for r in baseline:
        waiting[request_key(r)].append(r)
    pairs, extra = [], []
    for r in current:
        queue = waiting.get(request_key(r))
        if queue:
            pairs.append((queue.pop(0), r))
        else:
            extra.append(r)
    missing = [r for queue in waiting.values() for r in queue]
    return pairs, extra, missing


def _compared(b: ResultRecord, c: ResultRecord, kind: str | None) -> list[AnswerKind]:
    """The kinds two answers are compared by: text (every answer has words), and the task's kind when known,
    else each slot's kind, where either answer holds its values."""
    units = [kind_of(kind)] if kind is not None else list(slot_kinds())
    held = [u for u in units if u.holds(getattr(b, u.slot)) or u.holds(getattr(c, u.slot))]
    return list(dict.fromkeys([TEXT, *held]))


def answer_metrics(
    b: ResultRecord, c: ResultRecord, kind: str | None = None
) -> tuple[dict[str, float], list[str]]:
    """Agreement of two successful answers by their kind (None: by what they hold); notes say what could not
    be compared."""
    metrics: dict[str, float] = {}
    notes: list[str] = []
    for unit in _compared(b, c, kind):
        found, said = unit.compare(getattr(b, unit.slot), getattr(c, unit.slot))
        metrics.update(found)
        notes += said
    return metrics, notes


def _kind_check(
    unit: AnswerKind,
    rule: CompareCheck,
    value: float,
    tol: RequestTolerances,
    b: ResultRecord,
    c: ResultRecord,
) -> list[Check]:
    limit: Any = getattr(tol, rule.tolerance, None)  # a tolerance the judge does not have: no check
    if rule.op == "<=":
        return _at_most(rule.name, value, limit, rule.unit)
    if rule.op == ">=":
        return _at_least(rule.name, value, limit, rule.unit)
    if not limit:  # "==": a flag; the check shows both answers' values
        return []
    return [Check(rule.name, getattr(c, unit.slot), getattr(b, unit.slot), "==", value == 1.0)]


def _kind_checks(
    b: ResultRecord, c: ResultRecord, tol: RequestTolerances, metrics: Mapping[str, float]
) -> list[Check]:
    """Each kind's comparison checks whose value the comparison gave (a check two kinds share, once)."""
    checks: list[Check] = []
    seen: set[CompareCheck] = set()
    for unit in KINDS.values():
        for rule in unit.compare_checks:
            if rule not in seen and rule.metric in metrics:
                seen.add(rule)
                checks += _kind_check(unit, rule, metrics[rule.metric], tol, b, c)
    return checks


def _request_checks(
    b: ResultRecord | None, c: ResultRecord, tol: RequestTolerances, metrics: dict[str, float]
) -> list[Check]:
    checks: list[Check] = []
    if tol.require_success:
        checks.append(Check("success", c.outcome, "success", "==", c.success))
    if c.frames_expected and tol.clip_frames_missing_max is not None:
        checks += _at_most("clip_frames_missing", float(c.frames_missing), tol.clip_frames_missing_max)
    if b is None:
        return checks
    if tol.new_failure and b.success:
        checks.append(Check("still_succeeds", c.outcome, "success", "==", c.success))
    if not (b.success and c.success):
        return checks
    return checks + _kind_checks(b, c, tol, metrics)


def _ratio_check(
    name: str, current: float, baseline: float, ratio: float | None, slack: float, unit: str
) -> list[Check]:
    if ratio is None or baseline <= 0:
        return []
    limit = baseline * ratio + slack
    return [Check(name, current, limit, "<=", current <= limit + 1e-9, unit)]


def _task_checks(current: Sequence[ResultRecord], tol: Tolerances) -> list[Check]:
    """Each task's success rate against its minimum, and at least one successful request: a run in which
    nothing was answered never passes, whatever the tolerances say."""
    checks = [
        Check(
            "successful_requests",
            float(sum(r.success for r in current)),
            1.0,
            ">=",
            any(r.success for r in current),
        )
    ]
    for task in sorted({r.task for r in current}):
        mine = [r for r in current if r.task == task]
        rate = sum(r.success for r in mine) / len(mine)
        checks += _at_least(f"success_rate[{task}]", rate, tol.for_task(task).success_rate_min)
    return checks


def _damage_checks(current: Sequence[ResultRecord], tol: Tolerances) -> list[Check]:
    """What the recordings lost, over the run: frames the node refused (each bag's count once: its records
    carry it as bag_frames_refused; a record's own frames_refused counts its clip window only), storage files
    without CRCs."""
    agg = tol.aggregate
    refused: dict[str, int] = {}
    unverifiable: set[tuple[str, str]] = set()
    for r in current:
        # The bag's count holds at least what any one of its windows held (records built without it).
        refused[r.bag] = max(refused.get(r.bag, 0), r.bag_frames_refused, r.frames_refused)
        unverifiable |= {(r.bag, f) for f in r.unverifiable}
    checks = _at_most("frames_refused", float(sum(refused.values())), agg.frames_refused_max)
    return checks + _at_most("unverifiable_files", float(len(unverifiable)), agg.unverifiable_files_max)


def _aggregate_checks(
    stats: RunStats, base: RunStats | None, unmatched: int, tol: Tolerances, current: Sequence[ResultRecord]
) -> list[Check]:
    agg = tol.aggregate
    checks = _task_checks(current, tol)
    checks += _damage_checks(current, tol)
    checks += _at_least("success_rate", stats.success_rate, agg.success_rate_min)
    checks += _at_most("latency_p95", stats.latency_p95_s, agg.latency_p95_max_s, " s")
    if base is None:
        return checks
    checks += _at_most(
        "unmatched_requests", float(unmatched), None if agg.unmatched_max is None else agg.unmatched_max
    )
    if agg.success_rate_drop_max is not None:
        limit = base.success_rate - agg.success_rate_drop_max
        checks.append(
            Check(
                "success_rate_vs_baseline",
                stats.success_rate,
                limit,
                ">=",
                stats.success_rate >= limit - 1e-9,
            )
        )
    if agg.parse_rate_drop_max is not None and base.answered and stats.answered:
        limit = base.parse_rate - agg.parse_rate_drop_max
        checks.append(
            Check("parse_rate_vs_baseline", stats.parse_rate, limit, ">=", stats.parse_rate >= limit - 1e-9)
        )
    slack = agg.latency_slack_s
    checks += _ratio_check(
        "latency_p50", stats.latency_p50_s, base.latency_p50_s, agg.latency_p50_ratio_max, slack, " s"
    )
    checks += _ratio_check(
        "latency_p95", stats.latency_p95_s, base.latency_p95_s, agg.latency_p95_ratio_max, slack, " s"
    )
    checks += _ratio_check("ttft_p50", stats.ttft_p50_s, base.ttft_p50_s, agg.ttft_p50_ratio_max, slack, " s")
    checks += _ratio_check("ttft_p95", stats.ttft_p95_s, base.ttft_p95_s, agg.ttft_p95_ratio_max, slack, " s")
    checks += _ratio_check(
        "completion_tokens_mean",
        stats.completion_tokens_mean,
        base.completion_tokens_mean,
        agg.completion_tokens_ratio_max,
        1.0,
        "",
    )
    return checks


def judge(
    current: Sequence[ResultRecord],
    tolerances: Tolerances,
    baseline: Sequence[ResultRecord] | None = None,
    kinds: Mapping[str, str] | None = None,
) -> Verdict:
    """Every request of `current` checked (against its baseline partner when there is a baseline), then the
    run as a whole. kinds: task -> answer kind (the catalog's), to compare answers by their kind; a task not
    in it is compared by what its answers hold."""
    stats = RunStats.of(current)
    if baseline is None:
        requests = [
            RequestVerdict(c, None, {}, tuple(_request_checks(None, c, tolerances.for_task(c.task), {})))
            for c in current
        ]
        aggregate = _aggregate_checks(stats, None, 0, tolerances, current)
        return Verdict(tuple(requests), tuple(aggregate), stats, latency_gate=tolerances.latency_gate())
    pairs, extra, missing = match_records(baseline, current)
    partner = {id(c): b for b, c in pairs}
    requests = []
    for c in current:
        b = partner.get(id(c))
        tol = tolerances.for_task(c.task)
        metrics: dict[str, float] = {}
        notes: list[str] = []
        if b is None:
            notes.append("no baseline request with this bag, task, instruction and trigger time")
        elif b.success and c.success:
            metrics, notes = answer_metrics(b, c, (kinds or {}).get(c.task))
        elif not b.success and c.success:
            notes.append(f"fixed: failed in the baseline ({b.outcome})")
        checks = _request_checks(b, c, tol, metrics)
        requests.append(RequestVerdict(c, b, metrics, tuple(checks), tuple(notes)))
    for b in missing:
        requests.append(RequestVerdict(None, b, {}, (), ("in the baseline only",)))
    base_stats = RunStats.of(baseline)
    unmatched = len(extra) + len(missing)
    aggregate = _aggregate_checks(stats, base_stats, unmatched, tolerances, current)
    return Verdict(
        tuple(requests),
        tuple(aggregate),
        stats,
        base_stats,
        len(extra),
        len(missing),
        tolerances.latency_gate(),
    )
