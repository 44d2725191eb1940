"""Bag files: opening rosbag2 bags (mcap, sqlite3) with clear errors and the package's message types (io), and
camera bags made from videos (make). No rclpy."""

__all__ = ["io", "make"]
