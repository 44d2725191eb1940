"""reasoner_node's parameters on its tasks and triggers, in the order the node declares them: the task catalog
and default task, the timer, admission (slots, busy policy, queues), the node's periods and workers, its
lifecycle, and what a result must pass before it is published."""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.check_names import CHECK_NAMES
from cosmos_reasoner_ros.parameters.record import Parameter, seconds

__all__ = ["BUSY_POLICIES", "MIN_TRIGGER_PERIOD_S", "REQUEST_RECORDS"]

BUSY_POLICIES = ("reject", "replace")
MIN_TRIGGER_PERIOD_S = 0.05  # a timer faster than this only produces busy results

REQUEST_RECORDS: tuple[Parameter, ...] = (
    Parameter(
        "tasks_file",
        str,
        "",
        description="YAML merged over the shipped task catalog; empty: shipped catalog only",
    ),
    Parameter(
        "task",
        str,
        "next_action",
        description="default task for the timer, the service and goals without a task",
    ),
    Parameter(
        "instruction",
        str,
        "",
        description="default instruction (task text / object / question) filled into the prompt",
    ),
    Parameter(
        "max_instruction_chars",
        int,
        2000,
        unit="characters",
        range=(1, 1_000_000),
        description="longest instruction accepted (topic, goal or parameter)",
    ),
    seconds("trigger_period_s", 0.0, (0.0, 86400.0), "period of the timer trigger; 0: off"),
    Parameter(
        "max_in_flight",
        int,
        1,
        range=(1, 256),
        description="requests in flight per camera group",
    ),
    Parameter(
        "busy_policy",
        str,
        "reject",
        choices=BUSY_POLICIES,
        description="when busy: reject (a busy result) or replace (the newest trigger waits, older fail)",
    ),
    Parameter(
        "request_queue_depth",
        int,
        256,
        unit="requests",
        range=(1, 100_000),
        description="depth of the ~/trigger, ~/reason and ~/instruction queues (holds a burst of calls)",
    ),
    Parameter(
        "use_receive_time",
        bool,
        True,
        description="use the receive time for images whose header.stamp is zero",
    ),
    Parameter(
        "image_qos",
        str,
        "sensor_data",
        choices=("sensor_data", "reliable"),
        description="image subscription QoS: sensor_data (best effort) or reliable",
    ),
    seconds(
        "wait_for_server_s",
        0.0,
        (0.0, 86400.0),
        "before each request, wait up to this long for the server to be healthy",
    ),
    seconds("health_period_s", 2.0, (0.05, 3600.0), "period of the server health check (off the executor)"),
    seconds("diagnostics_period_s", 1.0, (0.05, 3600.0), "period of /diagnostics"),
    Parameter(
        "feedback_rate_hz",
        float,
        10.0,
        unit="Hz",
        range=(0.01, 1000.0),
        description="most action feedback messages per second while streaming",
    ),
    Parameter(
        "depth_window_px",
        int,
        3,
        unit="px",
        range=(0, 256),
        description="search radius for the nearest valid depth around a trajectory point",
    ),
    Parameter(
        "workers",
        int,
        0,
        range=(0, 1024),
        description="request worker threads; 0: cameras x max_in_flight + 1",
    ),
    seconds(
        "shutdown_timeout_s",
        3.0,
        (0.0, 60.0),
        "at shutdown, longest wait for cancelled requests to publish their results",
    ),
    Parameter(
        "lifecycle",
        bool,
        False,
        description=(
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
    Parameter(
        "trigger_tasks",
        str,
        "",
        description=(
            "tasks the timer and ~/trigger ask of each clip, comma-separated (one result each); empty: task"
        ),
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
    Parameter(
        "trigger_reasoning",
        bool,
        True,
        description=(
            "false: the timer's and ~/trigger's requests turn reasoning off (the task's plain prompt and "
            "profile)"
        ),
    ),
    Parameter(
        "publish_checks",
        list,
        list(CHECK_NAMES),
        description=(
            "geometric checks that must pass before ~/trajectory and ~/markers are published; [none]: "
            "publish regardless"
        ),
    ),
    Parameter(
        "min_depth_fraction",
        float,
        0.75,
        unit="0-1",
        range=(0.0, 1.0),
        description="depth_coverage check: least fraction of trajectory points with a valid depth",
    ),
    Parameter(
        "max_step_m",
        float,
        0.5,
        unit="m",
        range=(1e-06, 1000.0),
        description="max_step check: largest 3D distance between consecutive trajectory points",
    ),
)
