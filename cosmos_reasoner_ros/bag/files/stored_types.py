"""The message types of a recording's topics: the standard types of a distribution, this package's, and the
definitions the bag stores, each judged on a few of its messages (a stored placeholder loses to an installed
type that reads them; an older distribution's definition wins over today's). reader.py asks per topic set.
No ROS import."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rosbags.typesys import get_types_from_idl, get_types_from_msg
from rosbags.typesys.store import Typestore

from cosmos_reasoner_ros.bag.files.storages import TopicInfo, short_error

__all__ = ["SAMPLES", "same_layout", "typestore_for"]


def typestore_for(
    topics: list[TopicInfo], distro: str | None, samples: Callable[[str], list[bytes]]
) -> tuple[Typestore, dict[str, str], dict[str, str]]:
    """(store, {type: why it cannot be read}, {type: note}) for the topics: the standard types of the
    distribution (store_of), this package's messages, the types the bag defines that nothing here knows, and
    a standard type the bag recorded with another definition (an older distribution's: Humble's
    sensor_msgs/Range lacks Jazzy's `variance`) with the bag's own definition, said in the notes; unless that
    definition does not read the type's messages (`samples`: a few of them) and the installed type does
    (rosbag2's placeholders: "uint8 level" for rcl_interfaces/Log): then the installed type, said too."""
    from cosmos_reasoner_ros.bag.files.typestore import distro_name, fresh_typestore

    store = fresh_typestore(distro)
    problems: dict[str, str] = {}
    defined: dict[str, dict[str, Any]] = {}  # type -> the types its stored definition defines
    for t in topics:
        if t.msgtype in defined or t.msgtype in problems:
            continue
        known = t.msgtype in store.fielddefs
        if not t.definition_format:  # (an empty definition is an empty message: std_msgs/Empty)
            if not known:
                problems[t.msgtype] = "not a standard ROS 2 type, and the bag stores no definition of it"
            continue
        try:
            types = _parse_definition(t)
        except Exception as exc:  # rosbags' parser errors: that type only
            if not known:
                problems[t.msgtype] = f"its stored definition does not parse: {short_error(exc, 120)}"
            continue
        if t.msgtype not in types:
            if not known:
                problems[t.msgtype] = "its stored definition does not define it"
            continue
        defined[t.msgtype] = types
    own: dict[str, str] = {}
    overrides: dict[str, Any] = {}
    for msgtype, types in defined.items():
        differing = [
            n for n, fd in types.items() if n in store.fielddefs and _differs(store.fielddefs[n], fd)
        ]
        if differing and _installed_reads(store, types, msgtype, samples(msgtype)):
            own[msgtype] = (
                f"the bag's stored definition of {msgtype} does not describe its messages: read with ROS 2 "
                f"{distro_name(distro)}'s installed type, which does"
            )
        elif differing:
            own[msgtype] = (
                f"recorded with a definition of {msgtype} that differs from ROS 2 "
                f"{distro_name(distro)}'s (another distribution's): read with the bag's own"
            )
            for n, fd in types.items():
                overrides.setdefault(n, fd)
    if overrides:  # the bag's definitions first, then every standard type they leave
        store = _overridden(store, overrides)
    for types in defined.values():  # types nothing here knows, from their stored definitions
        new = {k: v for k, v in types.items() if k not in store.fielddefs}
        if new:
            store.register(new)
    return store, problems, own


def _overridden(store: Typestore, overrides: Mapping[str, Any]) -> Typestore:
    """A store of `overrides` and every type of `store` they leave."""
    from rosbags.typesys import get_typestore
    from rosbags.typesys.stores import Stores

    rebuilt = get_typestore(Stores.EMPTY)
    rebuilt.register(dict(overrides))
    rebuilt.register({n: fd for n, fd in store.fielddefs.items() if n not in rebuilt.fielddefs})
    return rebuilt


def _installed_reads(store: Typestore, types: Mapping[str, Any], msgtype: str, data: list[bytes]) -> bool:
    """Whether the installed type reads every sampled message and the bag's own definition does not read one
    of them: then the stored definition does not describe the data (with no message, it is believed)."""

    def reads(s: Typestore, message: bytes) -> bool:
        try:
            s.deserialize_cdr(message, msgtype)
        except Exception:  # whatever the CDR decoder trips over
            return False
        return True

    if not data or not all(reads(store, m) for m in data):
        return False
    own = _overridden(store, types)
    return not all(reads(own, m) for m in data)


def _parse_definition(t: TopicInfo) -> dict[str, Any]:
    if t.definition_format == "idl":
        types: dict[str, Any] = {}
        for part in _idl_parts(t.definition):
            types.update(get_types_from_idl(part))
        return types
    return dict(get_types_from_msg(t.definition, t.msgtype))


def same_layout(a: Typestore, b: Typestore, msgtype: str) -> bool:
    """Whether two stores lay out a type's CDR alike, its nested types included (a type one of them lacks
    does not)."""
    seen: set[str] = set()
    todo = [msgtype]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in a.fielddefs or name not in b.fielddefs:
            return False
        if _differs(a.fielddefs[name], b.fielddefs[name]):
            return False
        todo += [n for _, desc in a.fielddefs[name][1] for n in _names(desc)]
    return True


def _names(desc: Any) -> list[str]:
    """The message types a field description refers to."""
    if isinstance(desc, tuple):
        if len(desc) == 2 and _plain(desc[0]) == 2 and isinstance(desc[1], str):  # (Nodetype.NAME, type)
            return [desc[1]]
        return [n for d in desc for n in _names(d)]
    return []


_PLACEHOLDER = [("structure_needs_at_least_one_member", (1, ("uint8", 0)))]
SAMPLES = 5  # messages of a type that judge whether its stored definition describes them


def _differs(standard: Any, recorded: Any) -> bool:
    """Whether two definitions of a type lay out its CDR differently (constants do not count; an empty message
    is the placeholder byte whichever way it is written)."""

    def fields(fd: Any) -> list[Any]:
        out = [(name, _plain(desc)) for name, desc in fd[1]]
        return out or list(_PLACEHOLDER)

    return bool(fields(standard) != fields(recorded))


def _plain(desc: Any) -> Any:
    """A field description with rosbags' Nodetype enums as plain ints, nested tuples kept."""
    if isinstance(desc, tuple):
        return tuple(_plain(d) for d in desc)
    return int(desc) if type(desc).__name__ == "Nodetype" else desc


def _idl_parts(text: str) -> list[str]:
    """rosbag2 concatenates IDL definitions, each after a line of '=' and an `IDL: name` line."""
    sep = "=" * 80 + "\n"
    if not text.startswith(sep):
        return [text]
    return [part.split("\n", 1)[1] for part in text.split(sep)[1:] if "\n" in part]
