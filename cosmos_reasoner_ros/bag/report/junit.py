"""JUnit XML of judged runs, as CI servers read it (the Jenkins/Surefire junit-10 schema): one test suite per
run, one test case per request and one per aggregate tolerance; an exceeded tolerance is a <failure>."""

from __future__ import annotations

import socket
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cosmos_reasoner_ros.bag.judge.compare import Check, RequestVerdict, Verdict

__all__ = ["JUnitSuite", "junit_xml", "write_junit"]


@dataclass(frozen=True)
class JUnitSuite:
    name: str  # the run: a report name, a scenario, a scenario's sweep value
    verdict: Verdict | None  # None: the run could not be judged (`error` says why)
    seconds: float = 0.0  # wall time of the run
    properties: tuple[tuple[str, str], ...] = ()
    error: str = ""  # why the run stopped before it could be judged (a bad sweep value, a damaged bag)


def _time(seconds: float) -> str:
    return f"{max(0.0, seconds):.3f}"  # the schema's SUREFIRE_TIME: at most three decimals, no exponent


def _clean(text: str) -> str:
    # XML 1.0 cannot carry most control characters (random models emit them) nor lone surrogates (a file
    # name's bytes that are not UTF-8); keep tabs and newlines.
    return "".join(
        ch if (ch in "\t\n\r" or ord(ch) >= 0x20) and not 0xD800 <= ord(ch) <= 0xDFFF else "\ufffd"
        for ch in text
    )


def _failure(case: ET.Element, failed: Sequence[Check]) -> None:
    if failed:
        failure = ET.SubElement(case, "failure", type="tolerance", message=_clean(failed[0].describe()))
        failure.text = _clean("\n".join(c.describe() for c in failed))


def _request_case(suite: ET.Element, run: str, r: RequestVerdict) -> bool:
    rec = r.record
    classname = f"{run}.{rec.bag}" if rec.bag else run
    latency = r.current.latency_s if r.current is not None else 0.0
    case = ET.SubElement(
        suite, "testcase", classname=_clean(classname), name=_clean(r.name), time=_time(latency)
    )
    failed = [c for c in r.checks if not c.passed]
    _failure(case, failed)
    if r.current is None:
        ET.SubElement(case, "skipped", message="in the baseline only: no request of this run matched it")
    elif not failed and not r.current.answered:
        # A request that ended without an answer (no_frames, timeout, busy, ...) is no pass, even where the
        # tolerances allow some of them: it counts in its task's success rate (an aggregate case).
        reason = f"no answer: {r.current.outcome}: {r.current.error}"[:500]
        ET.SubElement(case, "skipped", message=_clean(reason))
    lines = [f"outcome: {r.current.outcome if r.current else '-'}"]
    if r.baseline is not None:
        lines.append(f"baseline outcome: {r.baseline.outcome}")
    lines += [f"{k}: {v:.4g}" for k, v in sorted(r.metrics.items())]
    lines += [c.describe() for c in r.checks if c.passed] + list(r.notes)
    if r.current is not None:
        lines += list(r.current.notes) + list(r.current.bag_notes)
    if r.current is not None:
        lines.append(f"answer: {r.current.answer if r.current.success else r.current.error}")
    ET.SubElement(case, "system-out").text = _clean("\n".join(lines))
    return bool(failed)


def junit_xml(suites: Sequence[JUnitSuite], name: str = "cosmos-reasoner-bag") -> ET.ElementTree:  # type: ignore[type-arg]
    root = ET.Element("testsuites", name=name)
    totals = [0, 0, 0.0]
    errors = 0
    for s in suites:
        suite = ET.SubElement(root, "testsuite", name=_clean(s.name))
        if s.verdict is None:
            _error_suite(suite, s)
            errors += 1
            totals[0] += 1
            totals[2] += s.seconds
            continue
        stats = s.verdict.stats  # the figures stdout, verdict.json and the HTML give (one percentile rule)
        figures = (
            ("latency_p50_s", f"{stats.latency_p50_s:.3f}"),
            ("latency_p95_s", f"{stats.latency_p95_s:.3f}"),
            ("ttft_p50_s", f"{stats.ttft_p50_s:.3f}"),
            ("latency_gate", s.verdict.latency_gate or "off"),
        )
        props = ET.SubElement(suite, "properties")
        for key, value in (*s.properties, *figures):
            ET.SubElement(props, "property", name=_clean(key), value=_clean(value))
        failures = skipped = 0
        for r in s.verdict.requests:
            failures += _request_case(suite, s.name, r)
        skipped = sum(c.find("skipped") is not None for c in suite.findall("testcase"))
        for check in s.verdict.aggregate:
            case = ET.SubElement(
                suite, "testcase", classname=f"{_clean(s.name)}.aggregate", name=check.name, time="0.000"
            )
            _failure(case, [] if check.passed else [check])
            ET.SubElement(case, "system-out").text = _clean(check.describe())
            failures += not check.passed
        tests = len(s.verdict.requests) + len(s.verdict.aggregate)
        suite.set("tests", str(tests))
        suite.set("failures", str(failures))
        suite.set("errors", "0")
        suite.set("skipped", str(skipped))
        suite.set("time", _time(s.seconds))
        suite.set("timestamp", time.strftime("%Y-%m-%dT%H:%M:%S"))
        suite.set("hostname", socket.gethostname())
        totals[0] += tests
        totals[1] += failures
        totals[2] += s.seconds
    root.set("tests", str(int(totals[0])))
    root.set("failures", str(int(totals[1])))
    root.set("errors", str(errors))
    root.set("time", _time(totals[2]))
    return ET.ElementTree(root)


def _error_suite(suite: ET.Element, s: JUnitSuite) -> None:
    """A run that stopped before it could be judged: one test case in error, saying why."""
    ET.SubElement(suite, "properties")
    case = ET.SubElement(suite, "testcase", classname=_clean(s.name), name="run", time=_time(s.seconds))
    error = ET.SubElement(case, "error", type="not run", message=_clean(s.error[:500]))
    error.text = _clean(s.error)
    for key, value in (("tests", "1"), ("failures", "0"), ("errors", "1"), ("skipped", "0")):
        suite.set(key, value)
    suite.set("time", _time(s.seconds))
    suite.set("timestamp", time.strftime("%Y-%m-%dT%H:%M:%S"))
    suite.set("hostname", socket.gethostname())


def write_junit(path: Path, suites: Sequence[JUnitSuite]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = junit_xml(suites)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
    return path
