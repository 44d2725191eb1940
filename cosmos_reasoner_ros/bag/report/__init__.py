"""Writing a run out: the HTML report and its plots (html), the baseline comparison's sections and sweep
pages (comparison), annotated and difference frames from the bag (frames), and JUnit XML (junit). No rclpy."""

__all__ = ["comparison", "frames", "html", "junit"]
