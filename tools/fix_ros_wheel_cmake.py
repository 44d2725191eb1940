"""Point the ROS 2 wheels' exported CMake files at this interpreter's include directories.

The PyPI wheels were built on a manylinux host and their *Export.cmake files name that host's Python and numpy
include directories; colcon builds of interfaces that depend on them fail until those paths are rewritten.
usage: python fix_ros_wheel_cmake.py VENV   (idempotent)
"""

from __future__ import annotations

import re
import sys
import sysconfig
from pathlib import Path

import numpy


def main() -> int:
    venv = Path(sys.argv[1])
    py_include = sysconfig.get_paths()["include"]
    np_include = numpy.get_include()
    np_pattern = re.compile(r"/opt/python/[^;\"\s]*/site-packages/numpy/_core/include")
    py_pattern = re.compile(r"/opt/python/[^;\"\s/]+/include/python3\.\d+")
    changed = 0
    for path in (venv / "share").rglob("*.cmake"):
        text = path.read_text()
        if "/opt/python/" not in text:
            continue
        new = py_pattern.sub(py_include, np_pattern.sub(np_include, text))
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"fix_ros_wheel_cmake: rewrote {changed} CMake files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
