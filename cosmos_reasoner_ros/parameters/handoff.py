"""The Nav2 handoff's parameters (`handoff.<name>` of reasoner_node), one record each, in the order the node
declares them. Off by default (mode none); handoff/settings.py reads and checks them."""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.check_names import CHECK_NAMES
from cosmos_reasoner_ros.parameters.record import (
    Parameter,
    by_name,
    flag,
    integer,
    names,
    number,
    seconds,
    text,
)

__all__ = ["HANDOFF_PARAMETERS", "HANDOFF_PREFIX", "HANDOFF_RECORDS"]

HANDOFF_PREFIX = "handoff."

HANDOFF_RECORDS: tuple[Parameter, ...] = (
    text(
        "mode",
        "none",
        (
            "none (off); dry_run (decide and publish every decision, send nothing); follow_path (nav2 "
            "FollowPath to the controller server); navigate_to_pose (NavigateToPose to the path's last "
            "pose)"
        ),
        choices=("none", "dry_run", "follow_path", "navigate_to_pose"),
    ),
    text("tasks", "drive_path", "tasks whose answers are handed off, comma-separated (points answers)"),
    text("camera", "", "the camera whose answers are handed off; empty: the first camera"),
    text(
        "camera_info_topic",
        "",
        (
            "CameraInfo of that camera (K for the ground plane); empty: its camera_info_topic, else "
            "/<camera>/camera_info"
        ),
    ),
    text(
        "frame_id",
        "",
        (
            "name of the camera's optical frame the path's points are in (x right, y down, z forward; not a"
            " target frame: Nav2 transforms with TF); empty: the camera's frame_id, else the images'"
        ),
    ),
    number(
        "camera_height_m",
        0.0,
        "m",
        (0.0, 100.0),
        "the camera's optical centre above the ground (the ground plane); must be set when on",
    ),
    number(
        "camera_pitch_deg",
        0.0,
        "deg",
        (-89.0, 89.0),
        "the optical axis below the horizontal (positive: looking down)",
    ),
    number("path_spacing_m", 0.1, "m", (0.01, 10.0), "poses of a path sent are this far apart"),
    number(
        "max_path_length_m",
        3.0,
        "m",
        (0.05, 1000.0),
        "a longer path is cropped to its first max_path_length_m",
    ),
    number(
        "min_path_length_m",
        0.2,
        "m",
        (0.0, 1000.0),
        (
            "ground_path gate: a shorter path (after near-repeated points, closer than a quarter of "
            "path_spacing_m, collapsed; cropped and resampled) is refused; at least 2 distinct poses always"
        ),
    ),
    number(
        "max_start_distance_m",
        1.5,
        "m",
        (0.0, 1000.0),
        "the path's first point at most this far from the camera's foot on the ground, else refused",
    ),
    number(
        "max_range_m",
        6.0,
        "m",
        (0.1, 1000.0),
        "ground-plane points farther than this from the camera's foot are refused (near the horizon)",
    ),
    seconds(
        "max_age_s",
        1.0,
        (0.01, 3600.0),
        "age gate: an answer older than this (robot clock, from the clip's end) is never sent",
    ),
    names(
        "checks",
        list(CHECK_NAMES),
        "geometric checks (ReasonerResult.checks) that must pass before a path is sent; [none]: none",
    ),
    integer(
        "agreement_answers",
        1,
        (1, 8),
        "answers about one clip that must agree (ask the task that many times: trigger_tasks); 1: off",
    ),
    number(
        "agreement_max_spread_m",
        0.3,
        "m",
        (0.0, 1000.0),
        "agreement gate: largest Frechet distance between two of those answers' paths",
    ),
    flag("validate_path", False, "ask the planner server's IsPathValid before sending"),
    text("is_path_valid_service", "/is_path_valid", "the IsPathValid service's name"),
    text(
        "path_valid_frame",
        "map",
        (
            "the planner's global costmap frame: IsPathValid reads a path's positions in it, so the path is"
            " transformed into it (tf2, at the clip's end) before it is asked"
        ),
    ),
    integer(
        "path_valid_max_cost",
        254,
        (1, 255),
        "IsPathValid max_cost (Kilted and later; Jazzy's service has no such field)",
    ),
    flag(
        "path_valid_unknown_is_obstacle", False, "IsPathValid consider_unknown_as_obstacle (Kilted and later)"
    ),
    flag(
        "confirm",
        False,
        "propose each path on ~/handoff/decision and send it only when ~/handoff/confirm accepts it",
    ),
    text(
        "on_refusal",
        "keep",
        (
            "a newer answer refused (stale, failed, any gate; not a busy or cancelled trigger): keep the "
            "goal in flight, or cancel it"
        ),
        choices=("keep", "cancel"),
    ),
    text(
        "on_stop",
        "cancel",
        (
            "the node stops (lifecycle deactivate, cleanup, shutdown; SIGINT, SIGTERM): cancel the goal it "
            "sent and wait up to server_timeout_s + result_timeout_s for Nav2's answer (on "
            "~/handoff/decision), or keep it running"
        ),
        choices=("cancel", "keep"),
    ),
    text("action_name", "", "the Nav2 action's name; empty: /follow_path or /navigate_to_pose (by mode)"),
    text("controller_id", "", "FollowPath controller_id; empty: the server's only one"),
    text("goal_checker_id", "", "FollowPath goal_checker_id; empty: the server's only one"),
    text("progress_checker_id", "", "FollowPath progress_checker_id; empty: the server's only one"),
    text("behavior_tree", "", "NavigateToPose behavior_tree; empty: the navigator's default"),
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
    seconds(
        "discovery_timeout_s",
        5.0,
        (0.0, 600.0),
        (
            "after activate, a path waits this long for the Nav2 action server (and IsPathValid) to be "
            "discovered before it is refused at server (path_valid); still absent then: one warning"
        ),
    ),
)
HANDOFF_PARAMETERS = by_name(HANDOFF_RECORDS)
