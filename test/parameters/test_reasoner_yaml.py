"""config/reasoner.yaml, the file users copy, against the records (cosmos_reasoner_ros/parameters/): every
record's key is there with the record's default, every key there has a record, and where a comment states a
unit ([s] first) or a range ((1-256)) it is the record's."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from support.paths import REASONER_YAML

from cosmos_reasoner_ros.parameters.cameras import CAMERA_RECORDS
from cosmos_reasoner_ros.parameters.handoff import HANDOFF_RECORDS
from cosmos_reasoner_ros.parameters.node import NODE_RECORDS
from cosmos_reasoner_ros.parameters.record import Parameter

TEXT = REASONER_YAML.read_text()
LINES = TEXT.splitlines()
BLOCK: dict[str, Any] = yaml.safe_load(TEXT)["reasoner_node"]["ros__parameters"]
UNIT = re.compile(r"^\[([^\]]+)\]")
RANGE = re.compile(r"\((-?[\d.]+)-(-?[\d.]+)\)")
# (records, the key's indentation in the file, the mapping they are in)
GROUPS = {
    "node": (NODE_RECORDS, 4, {k: v for k, v in BLOCK.items() if k not in ("camera", "handoff")}),
    "handoff": (HANDOFF_RECORDS, 6, BLOCK["handoff"]),
    **{
        f"camera.{name}": (CAMERA_RECORDS, 8, BLOCK["camera"][name])
        for name in BLOCK["cameras"]  # every camera named in `cameras` has its block
    },
}


def comment(group: str, indent: int, name: str) -> str:
    """The comment on the line that sets `name` at this indentation in the group's block (its first line)."""
    start = 0 if group == "node" else LINES.index(" " * (indent - 2) + group.split(".")[-1] + ":")
    line = next(line for line in LINES[start:] if line.startswith(" " * indent + f"{name}:"))
    assert "#" in line, f"{name} has no comment in {REASONER_YAML.name}"
    return line.split("#", 1)[1].strip()


def shown_default(group: str, record: Parameter) -> Any:
    """The default the file shows: the record's, but a camera's topic as the node resolves an empty one."""
    if group.startswith("camera.") and record.name == "topic":
        return f"/{group.split('.', 1)[1]}/image_raw"
    return record.default


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_record_is_in_the_file_with_its_default_and_every_key_has_a_record(group: str) -> None:
    records, _indent, block = GROUPS[group]
    assert set(block) == {r.name for r in records}, (
        f"{group}: in the file, not a record: {sorted(set(block) - {r.name for r in records})}; "
        f"a record, not in the file: {sorted({r.name for r in records} - set(block))}"
    )
    for record in records:
        value = block[record.name]
        assert value == shown_default(group, record), f"{group}.{record.name}: file {value!r}, record"
        assert record.problem(value) is None, (group, record.name)
        assert type(value) is record.type or (record.type is float and type(value) is int), record.name


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_unit_or_range_the_comment_states_is_the_records(group: str) -> None:
    records, indent, _block = GROUPS[group]
    for record in records:
        text = comment(group, indent, record.name)
        if unit := UNIT.match(text):
            assert unit.group(1) == record.unit, f"{record.name}: the file says [{unit.group(1)}]"
        for low, high in RANGE.findall(text):
            assert record.range == (float(low), float(high)), f"{record.name}: the file says ({low}-{high})"


def test_the_file_states_the_units_it_should() -> None:
    """Every record with a unit has it in its comment, but two that share one comment (the served model's
    processor, written as one sentence over three lines)."""
    shared = {"model_video_max_pixels", "model_video_min_pixels"}
    for group, (records, indent, _block) in GROUPS.items():
        for record in records:
            if record.unit and record.name not in shared:
                text = comment(group, indent, record.name)
                assert UNIT.match(text), f"{group}.{record.name}: no [{record.unit}]"
