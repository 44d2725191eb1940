"""The leaderboard: runs answering with known noise land in the right order in every column, the best per
column is marked, differences whose intervals overlap are flagged, the files hold the issue's form, names are
escaped, runs are scored afresh against labels where asked, and bad input is exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.labelled import boxes_text, generated_run, record

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.labels import bind_labels, labels_from_text
from cosmos_reasoner_ros.bag.leaderboard import Leaderboard, RunScores, leaderboard_markdown
from cosmos_reasoner_ros.bag.records import write_records
from cosmos_reasoner_ros.bag.scores import Interval, ScoreOptions, TaskScores, score_run, write_scores

NOISE = {"exact": 0.0, "slight": 0.1, "noisy": 0.35}


def make_runs(root: Path, requests: int = 150) -> dict[str, Path]:
    folders = {}
    for name, noise in [*NOISE.items(), ("wrong", None)]:
        run = generated_run(requests, noise or 0.0, seed=7, wrong=noise is None)
        folder = root / name
        folder.mkdir()
        write_records(run.records, folder / "results.jsonl")
        labels = labels_from_text(run.labels_text, "labels.yaml")
        scores = score_run(run.records, bind_labels([labels], ["robot"]), ScoreOptions())
        write_scores(scores, folder, run.records, ["labels.yaml"])
        (root / "labels.yaml").write_text(run.labels_text)
        folders[name] = folder
    return folders


def test_runs_with_known_noise_rank_in_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = make_runs(tmp_path)
    out = tmp_path / "board"
    order = ["noisy", "wrong", "exact", "slight"]  # rows stay in the order given
    assert main(["leaderboard", *(str(runs[n]) for n in order), "-o", str(out), "--title", "noise"]) == 0
    printed = capsys.readouterr().out
    assert f"best grounding_2d.mean_iou: {runs['exact']}" in printed
    data = json.loads((out / "leaderboard.json").read_text())
    assert [r["run"] for r in data["runs"]] == [str(runs[n]) for n in order]
    assert data["runs"][0]["tasks"] == json.loads((runs["noisy"] / "scores.json").read_text())["tasks"]

    def value(name: str, task: str, metric: str) -> float:
        row = data["runs"][order.index(name)]
        return float(row["tasks"][task]["metrics"][metric]["value"])

    higher = [
        ("grounding_2d", "mean_iou"),
        ("temporal_localization", "mean_tiou"),
        ("plausibility", "accuracy"),
        ("next_action", "match"),
    ]
    for task, metric in higher:
        assert value("exact", task, metric) >= value("slight", task, metric) > value("noisy", task, metric)
        assert value("noisy", task, metric) > value("wrong", task, metric)
    for metric in ("ade_px", "fde_px", "frechet_px"):
        assert value("exact", "trajectory", metric) < value("slight", "trajectory", metric)
        assert value("slight", "trajectory", metric) < value("noisy", "trajectory", metric)
        assert value("noisy", "trajectory", metric) < value("wrong", "trajectory", metric)
    columns = {(c["task"], c["metric"]): c for c in data["columns"]}
    for key in [*higher, ("trajectory", "ade_px")]:
        assert str(runs["exact"]) in columns[key]["best"], key
        assert str(runs["wrong"]) not in columns[key]["not_significant"], (
            key
        )  # far outside the best's interval
    assert columns[("trajectory", "completion_tokens")]["best"] == []  # tokens are not ranked
    assert columns[("trajectory", "latency_p50_s")]["better"] == "lower"
    md = (out / "leaderboard.md").read_text()
    assert md.startswith("# noise") and "## grounding_2d" in md and "| run | n | mean_iou ↑ |" in md
    assert md.count(f"| {runs['exact']} | 30 |") == 5  # one row per run in each task's table
    page = (out / "leaderboard.html").read_text()
    assert "★" in page and page.count("<tr>") == 2 + len(order)


def test_the_best_and_what_is_not_significantly_different() -> None:
    def run(name: str, iou: Interval) -> RunScores:
        return RunScores(name, {"grounding_2d": TaskScores(10, {"mean_iou": iou, "ade_px": iou})})

    board = Leaderboard.of(
        [
            run("a", Interval(0.80, 0.70, 0.90)),
            run("b", Interval(0.75, 0.65, 0.85)),  # overlaps a's interval
            run("c", Interval(0.40, 0.30, 0.50)),  # does not
            RunScores("d", {}),  # asked nothing of this task
        ]
    )
    iou = next(c for c in board.columns if c.metric == "mean_iou")
    assert iou.best == (0,) and iou.not_significant == (0, 1)
    ade = next(c for c in board.columns if c.metric == "ade_px")  # lower is better: c
    assert ade.best == (2,) and ade.not_significant == ()
    tied = Leaderboard.of([run("a", Interval(0.5, 0.5, 0.5)), run("b", Interval(0.5, 0.5, 0.5))])
    assert tied.columns[0].best == (0, 1) and tied.columns[0].not_significant == (0, 1)
    alone = Leaderboard.of([run("a", Interval(0.5, 0.4, 0.6))])
    assert alone.columns[0].best == (0,) and alone.columns[0].not_significant == ()
    md = leaderboard_markdown(board, "t")
    assert "| a | 10 | 0.80 [0.70, 0.90] ★≈ |" in md and "| b | 10 | 0.75 [0.65, 0.85] ≈ |" in md
    assert "| d | – | – | – |" in md


def test_too_few_labelled_answers_are_neither_starred_nor_compared(tmp_path: Path) -> None:
    """Issue 38, finding 4: grounding_2d with two answers, 0.642 [0.600, 0.684] against [1.00, 1.00], starred
    the exact run. Scored from records, as a user gets them: no interval, no star, and the board says why."""
    box = (0.0, 0.0, 100.0, 100.0)
    text = "labels:\n" + "".join(
        f"  - {{task: grounding_2d, at: {t}, answer: '{boxes_text([box])}'}}\n" for t in (1, 2)
    )
    labels = bind_labels([labels_from_text(text)], ["robot"])

    def run(name: str, boxes: list[tuple[float, float, float, float]]) -> RunScores:
        records = [record("grounding_2d", t + 1.0, boxes_text([b]), "boxes") for t, b in enumerate(boxes)]
        return RunScores(name, score_run(records, labels).tasks)

    board = Leaderboard.of([run("exact", [box, box]), run("noisy", [(0, 0, 100, 60), (0, 0, 100, 68)])])
    iou = next(c for c in board.columns if c.metric == "mean_iou")
    assert iou.best == () and iou.not_significant == () and iou.too_few == (0, 1)
    md = leaderboard_markdown(board, "t")
    assert "★" not in md.split("\n", 4)[-1] and "1.00 (too few labelled answers: 2)" in md
    assert "0.64 (too few labelled answers: 2)" in md


def test_names_are_escaped_and_runs_link_to_their_reports(tmp_path: Path) -> None:
    hostile = tmp_path / "<script>alert(1)&x | y"
    run = generated_run(10, 0.0)
    hostile.mkdir()
    write_records(run.records, hostile / "results.jsonl")
    (hostile / "index.html").write_text("report")
    labels = tmp_path / "labels.yaml"
    labels.write_text(run.labels_text)
    out = tmp_path / "out"
    assert main(["leaderboard", str(hostile), "-o", str(out), "--labels", str(labels)]) == 0
    page = (out / "leaderboard.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "href='../%3Cscript%3Ealert%281%29%26x%20%7C%20y/index.html'" in page
    assert "&amp;x | y" in page and "\\| y |" in (out / "leaderboard.md").read_text()
    assert not (hostile / "scores.json").exists()  # the runs are read, never written


def test_runs_are_scored_afresh_against_labels(tmp_path: Path) -> None:
    runs = make_runs(tmp_path, requests=50)
    other = generated_run(50, 0.0, seed=99, wrong=True)  # labels that the exact run's answers contradict
    labels = tmp_path / "other.yaml"
    labels.write_text(other.labels_text.replace("version: 1", "version: 1\nbag: robot"))
    out = tmp_path / "b"
    assert (
        main(["leaderboard", str(runs["exact"]), "-o", str(out), "--labels", str(labels), "--seed", "3"]) == 0
    )
    data = json.loads((out / "leaderboard.json").read_text())
    assert data["runs"][0]["tasks"]["plausibility"]["metrics"]["accuracy"]["value"] == 1.0  # same truth
    stored = json.loads((runs["exact"] / "scores.json").read_text())
    assert data["runs"][0]["tasks"]["trajectory"]["n"] == stored["tasks"]["trajectory"]["n"]


def test_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = str(tmp_path / "out")
    assert main(["leaderboard", str(tmp_path / "missing"), "-o", out]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["leaderboard", str(empty), "-o", out]) == 2
    assert "has no scores.json" in capsys.readouterr().err
    assert main(["leaderboard", str(empty), str(empty), "-o", out]) == 2
    assert "named twice" in capsys.readouterr().err
    (empty / "scores.json").write_text('{"tasks": {"t": {"n": "x", "metrics": {}}}}')
    assert main(["leaderboard", str(empty), "-o", out]) == 2
    assert "is not a scores file" in capsys.readouterr().err
    assert (
        main(["leaderboard", str(empty), "-o", out, "--judge-url", "http://u:p@h/v1", "--labels", "x"]) == 2
    )
