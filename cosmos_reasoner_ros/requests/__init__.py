"""One request's life, without ROS: what it asks and how it ended (outcome), the requests of one trigger or
goal (groups) and whether they may run (checks), admission, deadlines and exactly-once delivery (scheduler),
one clip to its answers (pipeline), the geometric checks of an answer (result_checks), and the value of the
Nav2 handoff's decision about it (handoff_decision: made by handoff/, carried to the result). Above the
reasoner, clips and geometry; the node drives it."""

from cosmos_reasoner_ros.requests.checks import (
    MAX_CAMERAS_PER_REQUEST,
    MAX_NAME_CHARS,
    group_problem,
    instruction_problem,
    request_problem,
    size_problem,
)
from cosmos_reasoner_ros.requests.groups import (
    MAX_TASKS_PER_CLIP,
    GroupSettings,
    RequestGroup,
    build_group,
)
from cosmos_reasoner_ros.requests.handoff_decision import DecisionKind, HandoffDecision
from cosmos_reasoner_ros.requests.outcome import (
    STAGES,
    Cancel,
    ClipSummary,
    Outcome,
    ProgressCallback,
    RequestSpec,
    Timings,
    error_outcome,
)
from cosmos_reasoner_ros.requests.pipeline import Pipeline, PipelineSettings
from cosmos_reasoner_ros.requests.result_checks import (
    CHECK_NAMES,
    Check,
    checks_pass,
    depth_checks,
    image_checks,
)
from cosmos_reasoner_ros.requests.scheduler import BUSY_POLICIES, Admission, Job, RequestScheduler

__all__ = [
    "BUSY_POLICIES",
    "CHECK_NAMES",
    "MAX_CAMERAS_PER_REQUEST",
    "MAX_NAME_CHARS",
    "MAX_TASKS_PER_CLIP",
    "STAGES",
    "Admission",
    "Cancel",
    "Check",
    "ClipSummary",
    "DecisionKind",
    "GroupSettings",
    "HandoffDecision",
    "Job",
    "Outcome",
    "Pipeline",
    "PipelineSettings",
    "ProgressCallback",
    "RequestGroup",
    "RequestScheduler",
    "RequestSpec",
    "Timings",
    "build_group",
    "checks_pass",
    "depth_checks",
    "error_outcome",
    "group_problem",
    "image_checks",
    "instruction_problem",
    "request_problem",
    "size_problem",
]
