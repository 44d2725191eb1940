"""Write constraints-<distro>.txt from the environment ./run set up: every installed distribution, pinned.

usage: ./run exec python tools/freeze_constraints.py   (COSMOS_REASONER_DISTRO chooses the environment)

`pip freeze` less two kinds of entries that nothing installs by that name: the colcon-built *.egg-info
directories inside the ROS wheels (ros-rclpy ships `rclpy-<version>.egg-info`), and the launch tools
installed from ../shared/ros2-python's wheel files (`name @ file://...`). Run it in a fresh environment after
changing requirements.txt or requirements-<distro>.txt, then set up again from the new file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def egg_info_names() -> set[str]:
    names = set()
    for dist in metadata.distributions():
        if str(getattr(dist, "_path", "")).endswith(".egg-info"):
            names.add(normalized(dist.metadata["Name"]))
    return names


def normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def main() -> int:
    distro = os.environ.get("COSMOS_REASONER_DISTRO", "jazzy")
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all", "--exclude", "pip", "--exclude", "setuptools"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    skip = egg_info_names()
    pins = sorted(
        (line for line in frozen if " @ " not in line and normalized(line.split("==")[0]) not in skip),
        key=lambda line: normalized(line.split("==")[0]),
    )
    header = [
        f"# Every package of the {distro.capitalize()} development environment, pinned (pip freeze of a",
        "# fresh ./run setup: tools/freeze_constraints.py). Used as -c with requirements.txt and",
        f"# requirements-{distro}.txt.",
    ]
    out = ROOT / f"constraints-{distro}.txt"
    out.write_text("\n".join(header + pins) + "\n")
    print(f"{out}: {len(pins)} pins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
