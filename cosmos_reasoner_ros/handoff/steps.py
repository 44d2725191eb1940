"""What the handoff's decisions are made of: the commands for the ROS edge (ValidatePath, SendGoal,
CancelGoal), a Step (decisions to publish and commands), what /diagnostics shows (HandoffStatus), and what the
state machine (decision.py) keeps of an answer, a proposal and a goal in flight."""

from __future__ import annotations

from dataclasses import dataclass, field

from cosmos_reasoner_ros.geometry import BasePath
from cosmos_reasoner_ros.requests import Check, HandoffDecision

__all__ = [
    "Answer",
    "CancelGoal",
    "Command",
    "Goal",
    "HandoffStatus",
    "Proposal",
    "SendGoal",
    "Step",
    "ValidatePath",
]


@dataclass(frozen=True)
class ValidatePath:
    """Ask the planner server's IsPathValid about the path; answer with Handoff.validated."""

    request_id: str
    path: BasePath


@dataclass(frozen=True)
class SendGoal:
    """Send the path to Nav2 (it preempts the goal in flight); report with goal_response, goal_result."""

    request_id: str
    path: BasePath


@dataclass(frozen=True)
class CancelGoal:
    """Cancel the goal that follows this answer's path."""

    request_id: str


Command = ValidatePath | SendGoal | CancelGoal


@dataclass(frozen=True)
class Step:
    decisions: tuple[HandoffDecision, ...] = ()
    commands: tuple[Command, ...] = ()

    def __add__(self, other: Step) -> Step:
        return Step(self.decisions + other.decisions, self.commands + other.commands)


@dataclass
class Answer:
    request_id: str
    clip_id: str
    task: str
    observed_ns: int  # the clip's end (the trigger's time for a request that got no clip)
    gates: list[Check] = field(default_factory=list)
    path: BasePath | None = None

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


@dataclass
class Proposal:
    answer: Answer
    stage: str  # K.VALIDATING, K.AWAITING_CONFIRMATION, or K.WAITING (for discovery: `then` next)
    since_ns: int
    then: str = ""


@dataclass
class Goal:
    answer: Answer
    accepted: bool = False
    cancel_requested: bool = False
    distance: float = 0.0
    speed: float = 0.0
    feedback_at: float | None = None  # the steady clock's time of the last feedback decision
    sent_at: float | None = None  # the steady clock's time it was sent (None: never sent, a dry run's)
    status_end: tuple[str, str] | None = None  # the end the action's status told first: (kind, reason)
    status_at: float | None = None  # the steady clock's time that status came


@dataclass(frozen=True)
class HandoffStatus:
    """What /diagnostics shows of the handoff."""

    counts: dict[str, int]
    refused: dict[str, int]  # refusals by the gate that failed (STOPPED: the node stopped first)
    last: HandoffDecision | None
    goal: str  # the request id of the goal in flight; "" none
    goal_state: str  # "sending", "active", "cancelling" or ""
    distance_to_goal: float
    speed: float
    last_result: HandoffDecision | None  # the newest goal event that ended a goal
