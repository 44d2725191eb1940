"""What the Nav2 handoff decides about an answer, as a value: the decision, why, every gate's verdict (as
result_checks.Check) and the path it sent or would send. The handoff (handoff/) makes these; an Outcome
carries the first one about its answer to its ReasonerResult (`handoff`), and the node publishes every one on
~/handoff/decision. Here, below the handoff, so that the request's outcome can hold it."""

from __future__ import annotations

from dataclasses import dataclass

from cosmos_reasoner_ros.geometry import BasePath
from cosmos_reasoner_ros.requests.result_checks import Check

__all__ = ["DecisionKind", "HandoffDecision"]


class DecisionKind:
    """The kinds of decision (HandoffDecision.msg's DECISION_* values)."""

    WAITING = "waiting"
    REFUSED = "refused"
    VALIDATING = "validating"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    SUPERSEDED = "superseded"
    SENT = "sent"
    WOULD_SEND = "would_send"
    CANCEL = "cancel"
    WOULD_CANCEL = "would_cancel"
    GOAL_ACCEPTED = "goal_accepted"
    GOAL_REJECTED = "goal_rejected"
    GOAL_SUCCEEDED = "goal_succeeded"
    GOAL_FAILED = "goal_failed"
    GOAL_CANCELED = "goal_canceled"
    GOAL_PREEMPTED = "goal_preempted"
    GOAL_FEEDBACK = "goal_feedback"
    ALL = (
        WAITING,
        REFUSED,
        VALIDATING,
        AWAITING_CONFIRMATION,
        SUPERSEDED,
        SENT,
        WOULD_SEND,
        CANCEL,
        WOULD_CANCEL,
        GOAL_ACCEPTED,
        GOAL_REJECTED,
        GOAL_SUCCEEDED,
        GOAL_FAILED,
        GOAL_CANCELED,
        GOAL_PREEMPTED,
        GOAL_FEEDBACK,
    )


@dataclass(frozen=True)
class HandoffDecision:
    """One decision about the path of one answer (request_id), or about the goal that follows it."""

    request_id: str
    clip_id: str
    task: str
    decision: str  # one of DecisionKind
    reason: str
    decided_ns: int  # the node's clock
    gates: tuple[Check, ...] = ()  # every gate's verdict so far, in order
    path: BasePath | None = None  # sent, proposed, or that would be sent
    dry_run: bool = False
    action: str = ""  # the Nav2 action of goal events
    error_code: int = 0  # the goal's result error_code
    error_msg: str = ""
    distance_to_goal: float = 0.0  # [m] the goal's last feedback
    speed: float = 0.0  # [m/s]

    @property
    def failed_gate(self) -> Check | None:
        return next((g for g in self.gates if not g.passed), None)
