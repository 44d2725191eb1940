"""Where rclpy's releases differ for the bag tools (and the tests' ROS peers): `rclpy.init()` is a context
manager only from Kilted on (Jazzy's returns None); `initialized()` is one for both. The ROS-free differences
between distributions are in ros_compat.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["initialized"]


@contextmanager
def initialized(**kwargs: Any) -> Iterator[None]:
    """`rclpy.init(**kwargs)` for the block, and its shutdown after it (Kilted's `with rclpy.init():`)."""
    import rclpy
    from rclpy.utilities import try_shutdown

    rclpy.init(**kwargs)
    try:
        yield
    finally:
        try_shutdown(context=kwargs.get("context"))
