"""bench/figures.py, what the benches share about their figures: latency statistics and the results file."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.paths import ROOT

# Loaded from its file: bench/ on sys.path would put its scripts' names before other modules of this session.
_spec = importlib.util.spec_from_file_location("figures", ROOT / "bench" / "figures.py")
assert _spec is not None and _spec.loader is not None
figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(figures)


def test_no_latencies_are_counted_as_none() -> None:
    assert figures.latency_ms([]) == {"n": 0}


@given(st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=50))
def test_latencies_in_milliseconds(values: list[float]) -> None:
    out = figures.latency_ms(values)
    assert out["n"] == len(values)
    assert out["max_ms"] == round(1000 * max(values), 1)
    assert out["median_ms"] == round(1000 * statistics.median(values), 1)
    assert out["median_ms"] <= out["p95_ms"] <= out["max_ms"]


@pytest.mark.parametrize("indent", [1, 2])
def test_the_figures_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], indent: int
) -> None:
    monkeypatch.setattr(figures, "BENCH_RESULTS", tmp_path / "results")
    data = {"b": [1, 2], "a": {"x": 0.5}}
    out = figures.write_figures("some_bench", data, indent=indent)
    assert out == tmp_path / "results" / "some_bench.json"
    assert out.read_text() == json.dumps(data, indent=indent) + "\n"
    assert capsys.readouterr().out == json.dumps(data) + "\n"
