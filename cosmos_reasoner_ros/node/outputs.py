"""What reasoner_node publishes for each outcome: the ReasonerResult, and for a success the answer text, the
annotated image and, with depth, the trajectory as a 3D nav_msgs/Path and markers.

Before publishing (`prepare`): the outcome's age at publication (a success older than its limit becomes a
stale result, which is published on ~/result only), the geometric checks of its answer, and the 3D paths,
published only when the checks named by publish_checks passed. Paths and markers are stamped with the clip's
end, the time of the observation, so that tf2 users can transform them to the present.

Also holds what the 3D path needs of the inputs: the recent depth images (bounded, decoded only when a
trajectory needs one) and the CameraInfo of each camera with depth.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from nav_msgs.msg import Path as PathMsg
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from cosmos_reasoner_ros.clips import message_to_array
from cosmos_reasoner_ros.geometry import (
    DepthHistory,
    Intrinsics,
    ProjectedPath,
    annotate,
    project_trajectories,
    seconds_to_ns,
)
from cosmos_reasoner_ros.msg import ReasonerResult
from cosmos_reasoner_ros.node.diagnostics import ProblemLog
from cosmos_reasoner_ros.node.parameters import NodeConfig
from cosmos_reasoner_ros.node.ros_conversion import (
    image_msg,
    path_markers,
    path_msg,
    result_msg,
    ros_string,
    time_to_ns,
)
from cosmos_reasoner_ros.requests import Outcome, checks_pass, depth_checks, image_checks

__all__ = ["ResultOutputs"]

_DEPTH_KEPT = 64  # depth images per camera at most (one per sampling period)


class ResultOutputs:
    """The node's output publishers and the depth state of its cameras. publish() is called once per outcome,
    on the scheduler's delivery thread."""

    def __init__(self, node: Node, cfg: NodeConfig, problems: ProblemLog, result_qos: QoSProfile) -> None:
        self._node, self._cfg, self._problems = node, cfg, problems
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        self.result_pub = node.create_publisher(ReasonerResult, "~/result", result_qos)
        self.next_action_pub = node.create_publisher(String, "~/next_action", reliable)
        self.annotated_pub = node.create_publisher(Image, "~/annotated_image", latched)
        self.markers_pub = node.create_publisher(MarkerArray, "~/markers", reliable)
        self.path_pub = node.create_publisher(PathMsg, "~/trajectory", reliable)
        period_ns = seconds_to_ns(1.0 / cfg.sample_fps)
        max_bytes = int(cfg.buffer_max_mb * 1024 * 1024)
        self.depth: dict[str, DepthHistory[Image]] = {
            c.name: DepthHistory(period_ns, _DEPTH_KEPT, max_bytes, lambda m: len(m.data))
            for c in cfg.cameras
            if c.depth_topic
        }
        self.camera_info: dict[str, CameraInfo] = {}
        self.points_dropped = 0  # trajectory points without valid depth, over all requests

    def destroy(self) -> None:
        for publisher in (
            self.result_pub,
            self.next_action_pub,
            self.annotated_pub,
            self.markers_pub,
            self.path_pub,
        ):
            self._node.destroy_publisher(publisher)

    # -- inputs of the 3D path -----------------------------------------------------------------------------

    def depth_callback(self, camera: str) -> Callable[[Image], None]:
        history, max_pixels = self.depth[camera], self._cfg.max_pixels

        def on_depth(msg: Image) -> None:
            if msg.width * msg.height > max_pixels:
                self._problems.report(
                    f"depth:{camera}:size", f"camera {camera}: depth image above max_pixels"
                )
                return
            stamp = time_to_ns(msg.header.stamp) or self._node.get_clock().now().nanoseconds
            history.add(stamp, msg)

        return on_depth

    def info_callback(self, camera: str) -> Callable[[CameraInfo], None]:
        def on_info(msg: CameraInfo) -> None:
            self.camera_info[camera] = msg

        return on_info

    # -- outputs -------------------------------------------------------------------------------------------

    def prepare(self, outcome: Outcome, now_ns: int) -> Outcome:
        """The outcome as it will be published at now_ns: its age and staleness, the geometric checks of its
        answer and, with depth, its 3D paths (published later only when the required checks passed)."""
        out = outcome.published(now_ns)
        parsed = out.parsed
        if parsed is None:
            return out
        checks = list(image_checks(parsed, out.image_width, out.image_height))
        paths: tuple[tuple[str, tuple[tuple[float, float, float], ...]], ...] = ()
        frame_id = ""
        if parsed.trajectories and out.answer_camera in self.depth:
            projected = self._project(out)
            if projected is not None:
                frame_id, by_label = projected
                checks.extend(depth_checks(by_label, self._cfg.min_depth_fraction, self._cfg.max_step_m))
                paths = tuple((label, path.points) for label, path in by_label)
        return dataclasses.replace(
            out,
            checks=tuple(checks),
            checks_passed=checks_pass(checks, self._cfg.publish_checks),
            paths_3d=paths,
            paths_frame_id=frame_id,
        )

    def _project(self, outcome: Outcome) -> tuple[str, list[tuple[str, ProjectedPath]]] | None:
        """The answer's trajectories back-projected with the depth closest to the clip's end, in the camera's
        optical frame; None (and a problem logged) without depth, camera info or a usable projection."""
        camera, parsed = outcome.answer_camera, outcome.parsed
        info = self.camera_info.get(camera)
        nearest = self.depth[camera].nearest(outcome.clip_end_ns)
        if info is None or nearest is None or parsed is None:
            self._problems.report(f"depth:{camera}:missing", f"camera {camera}: no depth or camera info yet")
            return None
        depth_msg: Any = nearest[1]
        try:
            depth = message_to_array(depth_msg, max_pixels=self._cfg.max_pixels)
            intrinsics = Intrinsics.from_k(list(info.k), info.width, info.height)
            projected = project_trajectories(
                parsed.trajectories,
                (outcome.image_width, outcome.image_height),
                depth,
                intrinsics,
                self._cfg.depth_window_px,
            )
        except Exception as exc:  # a broken depth image or camera info must not cost the result
            self._problems.report(
                f"depth:{camera}:{type(exc).__name__}", f"camera {camera}: no 3D path: {exc!r}"
            )
            return None
        frame_id = self._cfg.camera(camera).frame_id or info.header.frame_id or depth_msg.header.frame_id
        dropped = sum(path.dropped for _, path in projected)
        if dropped:
            self.points_dropped += dropped  # only the delivery thread writes it
            self._problems.report(
                f"depth:{camera}:dropped",
                f"camera {camera}: dropped {dropped} trajectory point(s) without valid depth",
            )
        return frame_id, projected

    def publish(self, outcome: Outcome, frame_id: str) -> None:
        """The result (always), then the extras of a success (not of a stale one); a failing extra never stops
        the others. 3D paths only when the required checks passed."""
        try:
            self.result_pub.publish(result_msg(outcome, frame_id))
        except Exception as exc:
            self._node.get_logger().error(
                f"request {outcome.request_id}: could not publish the result: {exc!r}"
            )
        if not outcome.success:
            return
        steps: list[tuple[str, Callable[[], None]]] = [
            ("next_action", lambda: self.next_action_pub.publish(String(data=ros_string(outcome.answer)))),
            ("annotated_image", lambda: self._publish_annotated(outcome, frame_id)),
        ]
        if outcome.paths_3d:
            if outcome.checks_passed:
                steps.append(("trajectory", lambda: self._publish_3d(outcome)))
            else:
                failed = [c.name for c in outcome.checks if not c.passed]
                self._problems.report(
                    f"checks:{','.join(failed)}",
                    f"request {outcome.request_id}: 3D path not published, checks failed: "
                    + "; ".join(f"{c.name}: {c.detail}" for c in outcome.checks if not c.passed),
                )
        for what, publish in steps:
            try:
                publish()
            except Exception as exc:
                self._problems.report(
                    f"publish:{what}:{type(exc).__name__}", f"could not publish {what}: {exc!r}"
                )

    def _publish_annotated(self, outcome: Outcome, frame_id: str) -> None:
        last, parsed = outcome.last_frame, outcome.parsed
        if last is None or last.image.ndim != 3:
            return
        caption = outcome.answer.strip().splitlines()[0] if outcome.answer.strip() else ""
        drawn = annotate(
            last.image,
            parsed.trajectories if parsed else (),
            parsed.boxes if parsed else (),
            caption=caption if parsed is not None and not parsed.trajectories and not parsed.boxes else "",
        )
        self.annotated_pub.publish(image_msg(drawn, last.stamp_ns, frame_id))

    def _publish_3d(self, outcome: Outcome) -> None:
        # Stamped with the clip's end: the time of the observation the path was drawn on (tf2 users transform
        # it from then to now), not the time the answer came.
        stamp, frame_id = outcome.clip_end_ns, outcome.paths_frame_id
        for _label, points3d in outcome.paths_3d:
            self.path_pub.publish(path_msg(points3d, frame_id, stamp))
        self.markers_pub.publish(path_markers(outcome.paths_3d, frame_id, stamp))
