"""The typestore: the message types the bag tools know, a ROS 2 distribution's standard types (rosbags' store
of that distribution: the one this process runs on, or the one a bag says it was recorded with) plus this
package's messages, found as .msg files of installed packages (no ROS import: rosbags reads and writes the CDR
itself). Reading bags: reader.py; writing them: writer.py."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.package_files import PACKAGE, share_dirs
from cosmos_reasoner_ros.ros_compat import ros_distro

__all__ = ["IMAGE_TYPES", "distro_name", "ensure_type", "fresh_typestore", "store_of", "typestore"]

IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")


def _msg_dirs(package: str) -> list[Path]:
    dirs = [root / "msg" for root in share_dirs()] if package == PACKAGE else []
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:
        return dirs
    with contextlib.suppress(PackageNotFoundError, ValueError, OSError):  # OSError: no AMENT_PREFIX_PATH
        dirs.append(Path(get_package_share_directory(package)) / "msg")
    return dirs


def _register_from_share(store: Typestore, msgtype: str) -> bool:
    """Find `pkg/msg/Name` as a .msg file of an installed package and register it (and what it uses)."""
    package, _, name = msgtype.split("/")
    for folder in _msg_dirs(package):
        path = folder / f"{name}.msg"
        if path.is_file():
            types = get_types_from_msg(path.read_text(), msgtype)
            store.register(types)
            for _, (_, fields) in types.items():
                for _, desc in fields:
                    for sub in _nested_types(desc):
                        if sub not in store.types:
                            _register_from_share(store, sub)
            return True
    return False


def _nested_types(desc: object) -> Iterator[str]:
    # Field descriptions are nested tuples; message references are (Nodetype.NAME, "pkg/msg/Name").
    if isinstance(desc, tuple):
        for item in desc:
            if isinstance(item, str) and item.count("/") == 2:
                yield item
            else:
                yield from _nested_types(item)


def store_of(distro: str | None = None) -> Stores:
    """rosbags' store of a ROS 2 distribution's standard types (None or one rosbags does not know: this
    process's distribution; Kilted's when rosbags knows neither)."""
    for name in (distro, ros_distro()):
        key = f"ROS2_{(name or '').strip().upper()}"
        if key in Stores.__members__:
            return Stores[key]
    return Stores.ROS2_KILTED


def distro_name(distro: str | None = None) -> str:
    """The distribution whose standard types store_of(distro) gives, capitalised (Jazzy)."""
    return store_of(distro).name.removeprefix("ROS2_").capitalize()


@functools.lru_cache(maxsize=8)
def typestore(distro: str | None = None) -> Typestore:
    """A distribution's standard types plus this package's messages (shared: never register a bag's types in
    it; a bag's own types go into `fresh_typestore()`)."""
    return fresh_typestore(distro)


def fresh_typestore(distro: str | None = None) -> Typestore:
    """A new store of a distribution's standard types (store_of) plus this package's messages."""
    store = get_typestore(store_of(distro))
    for name in ("BoundingBox2D", "TimeSegment", "Trajectory2D", "ReasonerResult"):
        ensure_type(store, f"{PACKAGE}/msg/{name}")
    return store


def ensure_type(store: Typestore, msgtype: str) -> None:
    if msgtype in store.types:
        return
    if not _register_from_share(store, msgtype):
        raise BagError(f"message type {msgtype} is unknown (no .msg file found for it)")
