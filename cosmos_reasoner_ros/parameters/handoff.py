"""The Nav2 handoff's parameters (`handoff.<name>` of reasoner_node), one record each, in the order the node
declares them. Off by default (mode none); handoff/settings.py reads and checks them."""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.check_names import CHECK_NAMES
from cosmos_reasoner_ros.parameters.record import Parameter, by_name, seconds

__all__ = ["HANDOFF_PARAMETERS", "HANDOFF_PREFIX", "HANDOFF_RECORDS"]

HANDOFF_PREFIX = "handoff."

HANDOFF_RECORDS: tuple[Parameter, ...] = (
    Parameter(
        "mode",
        str,
        "none",
        choices=("none", "dry_run", "follow_path", "navigate_to_pose"),
        description=(
            "none (off); dry_run (decide and publish every decision, send nothing); follow_path (nav2 "
            "FollowPath to the controller server); navigate_to_pose (NavigateToPose to the path's last "
            "pose)"
        ),
    ),
    Parameter(
        "tasks",
        str,
        "drive_path",
        description="tasks whose answers are handed off, comma-separated (points answers)",
    ),
    Parameter(
        "camera",
        str,
        "",
        description="the camera whose answers are handed off; empty: the first camera",
    ),
    Parameter(
        "camera_info_topic",
        str,
        "",
        description=(
            "CameraInfo of that camera (K for the ground plane); empty: its camera_info_topic, else "
            "/<camera>/camera_info"
        ),
    ),
    Parameter(
        "frame_id",
        str,
        "",
        description=(
            "name of the camera's optical frame the path's points are in (x right, y down, z forward; not a"
            " target frame: Nav2 transforms with TF); empty: the camera's frame_id, else the images'"
        ),
    ),
    Parameter(
        "camera_height_m",
        float,
        0.0,
        unit="m",
        range=(0.0, 100.0),
        description="the camera's optical centre above the ground (the ground plane); must be set when on",
    ),
    Parameter(
        "camera_pitch_deg",
        float,
        0.0,
        unit="deg",
        range=(-89.0, 89.0),
        description="the optical axis below the horizontal (positive: looking down)",
    ),
    Parameter(
        "path_spacing_m",
        float,
        0.1,
        unit="m",
        range=(0.01, 10.0),
        description="poses of a path sent are this far apart",
    ),
    Parameter(
        "max_path_length_m",
        float,
        3.0,
        unit="m",
        range=(0.05, 1000.0),
        description="a longer path is cropped to its first max_path_length_m",
    ),
    Parameter(
        "min_path_length_m",
        float,
        0.2,
        unit="m",
        range=(0.0, 1000.0),
        description=(
            "ground_path gate: a shorter path (after near-repeated points, closer than a quarter of "
            "path_spacing_m, collapsed; cropped and resampled) is refused; at least 2 distinct poses always"
        ),
    ),
    Parameter(
        "max_start_distance_m",
        float,
        1.5,
        unit="m",
        range=(0.0, 1000.0),
        description=(
            "the path's first point at most this far from the camera's foot on the ground, else refused"
        ),
    ),
    Parameter(
        "max_range_m",
        float,
        6.0,
        unit="m",
        range=(0.1, 1000.0),
        description=(
            "ground-plane points farther than this from the camera's foot are refused (near the horizon)"
        ),
    ),
    seconds(
        "max_age_s",
        1.0,
        (0.01, 3600.0),
        "age gate: an answer older than this (robot clock, from the clip's end) is never sent",
    ),
    Parameter(
        "checks",
        list,
        list(CHECK_NAMES),
        description=(
            "geometric checks (ReasonerResult.checks) that must pass before a path is sent; [none]: none"
        ),
    ),
    Parameter(
        "agreement_answers",
        int,
        1,
        range=(1, 8),
        description=(
            "answers about one clip that must agree (ask the task that many times: trigger_tasks); 1: off"
        ),
    ),
    Parameter(
        "agreement_max_spread_m",
        float,
        0.3,
        unit="m",
        range=(0.0, 1000.0),
        description="agreement gate: largest Frechet distance between two of those answers' paths",
    ),
    Parameter(
        "validate_path",
        bool,
        False,
        description="ask the planner server's IsPathValid before sending",
    ),
    Parameter(
        "is_path_valid_service",
        str,
        "/is_path_valid",
        description="the IsPathValid service's name",
    ),
    Parameter(
        "path_valid_frame",
        str,
        "map",
        description=(
            "the planner's global costmap frame: IsPathValid reads a path's positions in it, so the path is"
            " transformed into it (tf2, at the clip's end) before it is asked"
        ),
    ),
    Parameter(
        "path_valid_max_cost",
        int,
        254,
        range=(1, 255),
        description="IsPathValid max_cost (Kilted and later; Jazzy's service has no such field)",
    ),
    Parameter(
        "path_valid_unknown_is_obstacle",
        bool,
        False,
        description="IsPathValid consider_unknown_as_obstacle (Kilted and later)",
    ),
    Parameter(
        "confirm",
        bool,
        False,
        description=(
            "propose each path on ~/handoff/decision and send it only when ~/handoff/confirm accepts it"
        ),
    ),
    Parameter(
        "on_refusal",
        str,
        "keep",
        choices=("keep", "cancel"),
        description=(
            "a newer answer refused (stale, failed, any gate; not a busy or cancelled trigger): keep the "
            "goal in flight, or cancel it"
        ),
    ),
    Parameter(
        "on_stop",
        str,
        "cancel",
        choices=("cancel", "keep"),
        description=(
            "the node stops (lifecycle deactivate, cleanup, shutdown; SIGINT, SIGTERM): cancel the goal it "
            "sent and wait up to server_timeout_s + result_timeout_s for Nav2's answer (on "
            "~/handoff/decision), or keep it running"
        ),
    ),
    Parameter(
        "action_name",
        str,
        "",
        description="the Nav2 action's name; empty: /follow_path or /navigate_to_pose (by mode)",
    ),
    Parameter(
        "controller_id",
        str,
        "",
        description="FollowPath controller_id; empty: the server's only one",
    ),
    Parameter(
        "goal_checker_id",
        str,
        "",
        description="FollowPath goal_checker_id; empty: the server's only one",
    ),
    Parameter(
        "progress_checker_id",
        str,
        "",
        description="FollowPath progress_checker_id; empty: the server's only one",
    ),
    Parameter(
        "behavior_tree",
        str,
        "",
        description="NavigateToPose behavior_tree; empty: the navigator's default",
    ),
    seconds(
        "server_timeout_s",
        2.0,
        (0.05, 600.0),
        ("longest wait for an answer of Nav2: IsPathValid's, and a goal's end after the cancel at stop"),
    ),
    seconds(
        "goal_response_timeout_s",
        5.0,
        (0.05, 600.0),
        (
            "longest wait for Nav2's response to a goal sent (accepted or rejected): none by then (a response"
            " lost on a loaded robot) ends it as goal_rejected and cancels it by its goal id"
        ),
    ),
    seconds(
        "result_timeout_s",
        1.0,
        (0.05, 600.0),
        (
            "longest wait for a goal's result once the action's status says it ended (succeeded, canceled,"
            " aborted): none by then (the result lost) ends it from the status"
        ),
    ),
    Parameter(
        "discovery_timeout_s",
        float,
        5.0,
        unit="s",
        range=(0.0, 600.0),
        description=(
            "after activate, a path waits this long for the Nav2 action server (and IsPathValid) to be "
            "discovered before it is refused at server (path_valid); still absent then: one warning"
        ),
    ),
)
HANDOFF_PARAMETERS = by_name(HANDOFF_RECORDS)
