"""The Nav2 handoff, without ROS: from a trajectory answer to a path a base can follow (ground_path), the
gates it must pass before anything moves (gates), and the decisions over time: proposals, agreement,
confirmation, the goal in flight, preemption and cancellation (decision); its parameters (settings); a path
scored against a labelled one (scoring). Above requests, below the node: node/handoff.py is its ROS edge
(nav2_msgs, IsPathValid, ~/handoff/*); the bag tools rehearse it."""

from cosmos_reasoner_ros.handoff.decision import (
    FEEDBACK_PERIOD_S,
    STOPPED,
    CancelGoal,
    Command,
    Handoff,
    HandoffStatus,
    SendGoal,
    Step,
    ValidatePath,
)
from cosmos_reasoner_ros.handoff.gates import GATE_NAMES
from cosmos_reasoner_ros.handoff.ground_path import (
    BACKWARD_TOLERANCE_M,
    NEAR_FRACTION,
    PathLimits,
    answer_trajectory,
    camera_intrinsics,
    ground_path,
)
from cosmos_reasoner_ros.handoff.scoring import PathScore, score_path_against_label
from cosmos_reasoner_ros.handoff.settings import (
    ACTIONS,
    HANDOFF_PARAMETERS,
    MODES,
    ON_REFUSAL,
    ON_STOP,
    HandoffSettings,
    read_settings,
    settings_problems,
)

__all__ = [
    "ACTIONS",
    "BACKWARD_TOLERANCE_M",
    "FEEDBACK_PERIOD_S",
    "GATE_NAMES",
    "HANDOFF_PARAMETERS",
    "MODES",
    "NEAR_FRACTION",
    "ON_REFUSAL",
    "ON_STOP",
    "STOPPED",
    "CancelGoal",
    "Command",
    "Handoff",
    "HandoffSettings",
    "HandoffStatus",
    "PathLimits",
    "PathScore",
    "SendGoal",
    "Step",
    "ValidatePath",
    "answer_trajectory",
    "camera_intrinsics",
    "ground_path",
    "read_settings",
    "score_path_against_label",
    "settings_problems",
]
