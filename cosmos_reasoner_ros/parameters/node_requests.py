"""reasoner_node's parameters on its tasks and triggers, in the order the node declares them: the task catalog
and default task, the timer, admission (slots, busy policy, queues), the node's periods and workers, its
lifecycle, and what a result must pass before it is published."""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.check_names import CHECK_NAMES
from cosmos_reasoner_ros.parameters.record import Parameter, flag, integer, names, number, seconds, text

__all__ = ["BUSY_POLICIES", "MIN_TRIGGER_PERIOD_S", "REQUEST_RECORDS"]

BUSY_POLICIES = ("reject", "replace")
MIN_TRIGGER_PERIOD_S = 0.05  # a timer faster than this only produces busy results

REQUEST_RECORDS: tuple[Parameter, ...] = (
    text("tasks_file", "", "YAML merged over the shipped task catalog; empty: shipped catalog only"),
    text("task", "next_action", "default task for the timer, the service and goals without a task"),
    text("instruction", "", "default instruction (task text / object / question) filled into the prompt"),
    integer(
        "max_instruction_chars",
        2000,
        (1, 1_000_000),
        "longest instruction accepted (topic, goal or parameter)",
        unit="characters",
    ),
    seconds("trigger_period_s", 0.0, (0.0, 86400.0), "period of the timer trigger; 0: off"),
    integer("max_in_flight", 1, (1, 256), "requests in flight per camera group"),
    text(
        "busy_policy",
        "reject",
        "when busy: reject (a busy result) or replace (the newest trigger waits, older fail)",
        choices=BUSY_POLICIES,
    ),
    integer(
        "request_queue_depth",
        256,
        (1, 100_000),
        "depth of the ~/trigger, ~/reason and ~/instruction queues (holds a burst of calls)",
        unit="requests",
    ),
    flag("use_receive_time", True, "use the receive time for images whose header.stamp is zero"),
    text(
        "image_qos",
        "sensor_data",
        "image subscription QoS: sensor_data (best effort) or reliable",
        choices=("sensor_data", "reliable"),
    ),
    seconds(
        "wait_for_server_s",
        0.0,
        (0.0, 86400.0),
        "before each request, wait up to this long for the server to be healthy",
    ),
    seconds("health_period_s", 2.0, (0.05, 3600.0), "period of the server health check (off the executor)"),
    seconds("diagnostics_period_s", 1.0, (0.05, 3600.0), "period of /diagnostics"),
    number(
        "feedback_rate_hz",
        10.0,
        "Hz",
        (0.01, 1000.0),
        "most action feedback messages per second while streaming",
    ),
    integer(
        "depth_window_px",
        3,
        (0, 256),
        "search radius for the nearest valid depth around a trajectory point",
        unit="px",
    ),
    integer("workers", 0, (0, 1024), "request worker threads; 0: cameras x max_in_flight + 1"),
    seconds(
        "shutdown_timeout_s",
        3.0,
        (0.0, 60.0),
        "at shutdown, longest wait for cancelled requests to publish their results",
    ),
    flag(
        "lifecycle",
        False,
        (
            "true: a managed node (ros2 lifecycle configure/activate/deactivate/cleanup/shutdown), started "
            "unconfigured; false: configures and activates itself at start"
        ),
    ),
    seconds(
        "activate_wait_for_server_s",
        0.0,
        (0.0, 3600.0),
        ("managed node: activate waits this long for the server to be healthy, else fails; 0: no wait"),
    ),
    seconds(
        "max_result_age_s",
        0.0,
        (0.0, 86400.0),
        (
            "a successful answer older than this when published (clip end to publication) is published as "
            "stale and not forwarded to ~/next_action, ~/trajectory, ~/markers; 0: no limit; goals may "
            "override"
        ),
    ),
    text(
        "trigger_tasks",
        "",
        "tasks the timer and ~/trigger ask of each clip, comma-separated (one result each); empty: task",
    ),
    seconds(
        "trigger_deadline_s",
        0.0,
        (0.0, 86400.0),
        (
            "deadline of the timer's and ~/trigger's requests from the trigger (then cancelled: timeout); "
            "0: none"
        ),
    ),
    flag(
        "trigger_reasoning",
        True,
        (
            "false: the timer's and ~/trigger's requests turn reasoning off (the task's plain prompt and "
            "profile)"
        ),
    ),
    names(
        "publish_checks",
        list(CHECK_NAMES),
        (
            "geometric checks that must pass before ~/trajectory and ~/markers are published; [none]: "
            "publish regardless"
        ),
    ),
    number(
        "min_depth_fraction",
        0.75,
        "0-1",
        (0.0, 1.0),
        "depth_coverage check: least fraction of trajectory points with a valid depth",
    ),
    number(
        "max_step_m",
        0.5,
        "m",
        (1e-06, 1000.0),
        "max_step check: largest 3D distance between consecutive trajectory points",
    ),
)
