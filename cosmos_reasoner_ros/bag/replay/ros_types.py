"""What rclpy takes from a recording: the message class of a recorded type, and whether a recorded topic's
name is one ROS 2 accepts (a recording by another tool may hold names rclpy refuses)."""

from __future__ import annotations

import importlib
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["importable", "message_class", "topic_name_problem"]


def message_class(msgtype: str) -> Any:
    """The rclpy message class of `pkg/msg/Name`."""
    parts = msgtype.split("/")
    if len(parts) == 2:  # `pkg/Name`, as older recordings name types
        parts.insert(1, "msg")
    try:
        package, kind, name = parts
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ImportError, AttributeError, ValueError):
        raise BagError(f"message type {msgtype} is not installed for rclpy") from None


def topic_name_problem(name: str) -> str:
    """Why ROS 2 would refuse `name` as a topic name ("" when it takes it): a recording made by another tool
    (ROS 1, a bridge) may name a topic `/cam-1/image`, which rclpy refuses with an exception."""
    from rclpy.exceptions import NameValidationException
    from rclpy.validate_full_topic_name import validate_full_topic_name
    from rclpy.validate_topic_name import validate_topic_name

    try:
        (validate_full_topic_name if name.startswith("/") else validate_topic_name)(name)
    except NameValidationException as exc:
        reason = str(exc).splitlines()[0].removeprefix("Invalid topic name: ")
        return f"{name[:120]!r} is not a valid ROS 2 topic name ({reason}); --remap it to one"
    return ""


def importable(msgtype: str) -> bool:
    """Whether rclpy has the message class of `msgtype`."""
    try:
        message_class(msgtype)
    except BagError:
        return False
    return True
