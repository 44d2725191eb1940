"""pip install for tools that need the Python package without a ROS workspace (parsing, bags, the server).

colcon builds the ROS package from CMakeLists.txt (it generates the messages); this file is not used there.
Both take the executables from scripts/ (one file each: the one place they are declared) and ship every file
of config/, launch/, msg/ and action/ in share/cosmos_reasoner_ros.
"""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def console_scripts() -> list[str]:
    """`name = module:main` for each scripts/<name>, read from its `from <module> import main` line."""
    entries = []
    for script in sorted((HERE / "scripts").iterdir()):
        found = re.search(r"^from ([\w.]+) import main$", script.read_text(), re.MULTILINE)
        if found is None:
            raise SystemExit(f"{script} does not say `from <module> import main`")
        entries.append(f"{script.name} = {found.group(1)}:main")
    return entries


def share(folder: str) -> tuple[str, list[str]]:
    files = sorted(str(p.relative_to(HERE)) for p in (HERE / folder).iterdir() if p.is_file())
    return (f"share/cosmos_reasoner_ros/{folder}", files)


setup(
    name="cosmos_reasoner_ros",
    version="0.1.0",
    description="ROS 2 node asking NVIDIA's Cosmos 3 Reasoner about camera clips",
    license="Apache-2.0",
    packages=find_packages(include=["cosmos_reasoner_ros", "cosmos_reasoner_ros.*"]),
    package_data={"cosmos_reasoner_ros": ["data/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/cosmos_reasoner_ros"]),
        ("share/cosmos_reasoner_ros", ["package.xml"]),
        share("config"),
        share("launch"),
        share("msg"),
        share("action"),
    ],
    python_requires=">=3.10",
    install_requires=[
        "numpy>=1.21",
        "opencv-python-headless>=4.5",
        "openai>=1.40",
        "PyYAML>=5.4",
        "rosbags>=0.11",
        "mcap>=1.2",
        "zstandard>=0.22",
    ],
    extras_require={"h264": ["av>=12"], "report": ["matplotlib>=3.5", "tqdm>=4.60"]},
    entry_points={"console_scripts": console_scripts()},
)
