"""Where the package's own files are (config/, msg/), with one precedence for every caller.

Precedence, the same for every file:
1. the source checkout the modules were imported from (`<repo>/config/...` beside `<repo>/package.xml`):
   edits take effect without rebuilding;
2. the installed ROS package's share directory (the ament index: `ros2 pkg prefix cosmos_reasoner_ros`);
3. a pip install's data files (`<sys.prefix>/share/cosmos_reasoner_ros/...`).
No ROS import at module level: the core uses this without ROS.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PACKAGE", "config_file", "package_file", "share_dirs"]

PACKAGE = "cosmos_reasoner_ros"

_SOURCE_ROOT = Path(__file__).resolve().parents[1]


def _roots() -> Iterator[Path]:
    """Candidate roots in precedence order; the ament index is asked only when the checkout did not answer."""
    if (_SOURCE_ROOT / "package.xml").is_file():
        yield _SOURCE_ROOT
    try:  # imported lazily: the core must import without ROS
        from ament_index_python.packages import get_package_share_directory

        share = Path(get_package_share_directory(PACKAGE))
    except Exception:  # ImportError, PackageNotFoundError, ValueError: no ament index here
        share = None
    if share is not None:
        yield share
    yield Path(sys.prefix) / "share" / PACKAGE


def share_dirs() -> list[Path]:
    """The package's file roots in precedence order (only those that exist)."""
    found: list[Path] = []
    for root in _roots():
        if root.is_dir() and root not in found:
            found.append(root)
    return found


def package_file(*parts: str) -> Path | None:
    """The first existing `<root>/<parts...>` in precedence order, or None."""
    for root in _roots():
        candidate = root.joinpath(*parts)
        if candidate.exists():
            return candidate
    return None


def config_file(name: str) -> Path:
    """A shipped file of config/ (reasoner.yaml, server.yaml, tasks.yaml, fastdds_shm.xml).

    Raises FileNotFoundError naming every place looked at.
    """
    found = package_file("config", name)
    if found is None:
        looked = ", ".join(str(root / "config" / name) for root in share_dirs()) or "no package root found"
        raise FileNotFoundError(f"the shipped config/{name} was not found (looked at: {looked})")
    return found
