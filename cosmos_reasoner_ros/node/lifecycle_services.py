"""A managed node's lifecycle services (`~/change_state`, `~/get_state`, `~/get_available_states`,
`~/get_available_transitions`, `~/get_transition_graph`), served by the node over rclpy's state machine
instead of by rcl, so that every request gets its answer:

- a transition that does not exist from the current state (`activate` while unconfigured, `inactive_shutdown`
  while active, an unknown id or label) is answered `success: false` and the node stays where it is, as a ROS
  2 lifecycle node answers it (rclpy raised `RCLError: Transition is not registered` out of the callback: no
  reply, and the process exited 1); so is every transition while the process shuts down;
- requests queue as deep as the node's other request services (rcl's lifecycle services keep 10: of 12
  transitions sent back to back the first two were never answered);
- the state is answered during a transition (the queries have a callback group of their own; transitions
  run one at a time in theirs).

rcl still publishes `~/transition_event` on every state change (launch_ros's LifecycleNode listens to it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lifecycle_msgs.msg import State, TransitionDescription
from lifecycle_msgs.srv import ChangeState, GetAvailableStates, GetAvailableTransitions, GetState
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.qos import QoSProfile

__all__ = ["LifecycleServices", "transition_refusal"]

# (transition id, label) of each transition the state machine has from its current state
Available = list[tuple[int, str]]


def transition_refusal(transition_id: int, label: str, state: str, available: Available) -> str:
    """Why this transition cannot run from `state` ("" when it can). A label, when given, names the
    transition among the current state's (as rcl looks it up), otherwise the id does."""
    names = ", ".join(f"{name} ({tid})" for tid, name in available) or "none"
    if label:
        if any(name == label for _tid, name in available):
            return ""
        return f"no transition {label[:64]!r} from state {state} (available: {names})"
    if any(tid == transition_id for tid, _name in available):
        return ""
    return f"no transition with id {transition_id} from state {state} (available: {names})"


class LifecycleServices:
    """The five services on `node` (a LifecycleNodeMixin built with enable_communication_interface=False).
    `busy()` refuses every transition while it says why; `log` gets each refusal."""

    def __init__(
        self, node: Any, qos: QoSProfile, busy: Callable[[], str], log: Callable[[str], object]
    ) -> None:
        self._machine = node._state_machine  # rclpy's: current_state, available_transitions, ...
        self._busy, self._log = busy, log
        shutdown = node.trigger_shutdown  # rclpy picks the shutdown transition of the current state
        self._run: dict[int, Callable[[], TransitionCallbackReturn]] = {
            1: node.trigger_configure,
            2: node.trigger_cleanup,
            3: node.trigger_activate,
            4: node.trigger_deactivate,
            5: shutdown,
            6: shutdown,
            7: shutdown,
        }
        transitions, queries = MutuallyExclusiveCallbackGroup(), ReentrantCallbackGroup()
        node.create_service(
            ChangeState, "~/change_state", self._change_state, qos_profile=qos, callback_group=transitions
        )
        for srv_type, name, callback in (
            (GetState, "~/get_state", self._get_state),
            (GetAvailableStates, "~/get_available_states", self._get_available_states),
            (GetAvailableTransitions, "~/get_available_transitions", self._get_available_transitions),
            (GetAvailableTransitions, "~/get_transition_graph", self._get_transition_graph),
        ):
            node.create_service(srv_type, name, callback, qos_profile=qos, callback_group=queries)

    def _change_state(self, request: Any, response: Any) -> Any:
        state = str(self._machine.current_state[1])
        available = [(int(t[0]), str(t[1])) for t in self._machine.available_transitions]
        transition_id, label = int(request.transition.id), str(request.transition.label)
        refusal = self._busy() or transition_refusal(transition_id, label, state, available)
        if label and not refusal:
            transition_id = next(tid for tid, name in available if name == label)
        if not refusal and transition_id not in self._run:
            refusal = f"transition {transition_id} from state {state} is the state machine's own"
        if refusal:
            self._log(f"change_state refused: {refusal}; the node stays {state}")
            response.success = False
            return response
        response.success = self._run[transition_id]() == TransitionCallbackReturn.SUCCESS
        return response

    def _get_state(self, _request: Any, response: Any) -> Any:
        response.current_state.id, response.current_state.label = self._machine.current_state
        return response

    def _get_available_states(self, _request: Any, response: Any) -> Any:
        response.available_states = [State(id=i, label=name) for i, name in self._machine.available_states]
        return response

    def _get_available_transitions(self, _request: Any, response: Any) -> Any:
        response.available_transitions = _descriptions(self._machine.available_transitions)
        return response

    def _get_transition_graph(self, _request: Any, response: Any) -> Any:
        response.available_transitions = _descriptions(self._machine.transition_graph)
        return response


def _descriptions(transitions: Any) -> list[TransitionDescription]:
    described = []
    for transition_id, label, start_id, start_label, goal_id, goal_label in transitions:
        item = TransitionDescription()
        item.transition.id, item.transition.label = transition_id, label
        item.start_state.id, item.start_state.label = start_id, start_label
        item.goal_state.id, item.goal_state.label = goal_id, goal_label
        described.append(item)
    return described
