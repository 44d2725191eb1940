"""Is the answer right? A run's requests scored against labels, no rclpy: the metrics' names, statistics and
directions (metric_specs), one request graded against its label (grading; a rehearsed handoff's path against
it: handoff_grading), confidence intervals chosen by their coverage (intervals), scores per task (scoring:
score_run), the optional text judge (text_judge), thresholds as checks (thresholds) and scores.json
(scores_file)."""

from cosmos_reasoner_ros.bag.scores.grading import Grade, Projector, grade
from cosmos_reasoner_ros.bag.scores.handoff_grading import GroundOf, HandoffGround, handoff_values
from cosmos_reasoner_ros.bag.scores.intervals import (
    MIN_N,
    TOO_FEW,
    Interval,
    interval_of,
    intervals,
    statistic,
)
from cosmos_reasoner_ros.bag.scores.metric_specs import (
    HANDOFF,
    KIND_METRICS,
    METRES,
    METRICS,
    MetricSpec,
    metric_spec,
)
from cosmos_reasoner_ros.bag.scores.scores_file import (
    SCORES_FILE,
    read_scores,
    scores_json,
    tasks_json,
    write_scores,
)
from cosmos_reasoner_ros.bag.scores.scoring import (
    HandoffSummary,
    Judged,
    ScoreOptions,
    Scores,
    TaskScores,
    handoff_summary,
    score_grades,
    score_run,
)
from cosmos_reasoner_ros.bag.scores.text_judge import (
    JudgeAnswer,
    JudgeSettings,
    TextJudge,
    judge_prompt,
    read_verdict,
)
from cosmos_reasoner_ros.bag.scores.thresholds import MinScore, parse_min_score, score_checks

__all__ = [
    "HANDOFF",
    "KIND_METRICS",
    "METRES",
    "METRICS",
    "MIN_N",
    "SCORES_FILE",
    "TOO_FEW",
    "Grade",
    "GroundOf",
    "HandoffGround",
    "HandoffSummary",
    "Interval",
    "JudgeAnswer",
    "JudgeSettings",
    "Judged",
    "MetricSpec",
    "MinScore",
    "Projector",
    "ScoreOptions",
    "Scores",
    "TaskScores",
    "TextJudge",
    "grade",
    "handoff_summary",
    "handoff_values",
    "interval_of",
    "intervals",
    "judge_prompt",
    "metric_spec",
    "parse_min_score",
    "read_scores",
    "read_verdict",
    "score_checks",
    "score_grades",
    "score_run",
    "scores_json",
    "statistic",
    "tasks_json",
    "write_scores",
]
