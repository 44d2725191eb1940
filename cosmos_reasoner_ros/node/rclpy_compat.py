"""Where rclpy's releases differ for the node: a subscription callback of two parameters gets each message's
info (its publisher's sequence number, with rmw_fastrtps) from rclpy 4 (Iron) on; Humble's rclpy calls it with
the message only. The ROS-free differences between distributions are in ros_compat.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["with_message_info"]


def with_message_info(callback: Callable[[Any, int | None], None]) -> Callable[..., None]:
    """A subscription callback taking (message, publisher sequence number or None), as rclpy calls it."""
    from rclpy.subscription import Subscription

    if not hasattr(getattr(Subscription, "CallbackType", None), "WithMessageInfo"):  # Humble
        return lambda msg: callback(msg, None)

    def with_info(msg: Any, info: Any) -> None:
        sequence = info.get("publication_sequence_number") if isinstance(info, dict) else None
        # rmw implementations without sequence numbers report 0 or the maximum (RMW_MESSAGE_INFO_SEQUENCE_...)
        callback(msg, sequence if isinstance(sequence, int) and 0 < sequence < 2**63 else None)

    return with_info
