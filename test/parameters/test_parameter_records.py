"""The parameter records (cosmos_reasoner_ros/parameters/): generated values for every record, in and out of
its range or choices, non-finite and of the wrong type, judged by the record's checker, by the node's
validation (node/parameters.py validate) and by the handoff's (handoff/settings.py settings_problems), each
against an oracle computed from the record's fields alone. Also: the modules that take a value from the
records (media forms, busy policies, model families, check names) refuse exactly what the record refuses, and
the server's settings default to the node's media folder."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.configs import default_config
from support.handoff_answers import settings as handoff_settings

from cosmos_reasoner_ros.errors import TaskError
from cosmos_reasoner_ros.handoff import HandoffSettings, settings_problems
from cosmos_reasoner_ros.model_family import AUTO, FAMILIES, FAMILY_NAMES, family
from cosmos_reasoner_ros.node.parameters import CameraConfig, NodeConfig, validate
from cosmos_reasoner_ros.parameters.cameras import CAMERA_RECORDS
from cosmos_reasoner_ros.parameters.handoff import HANDOFF_RECORDS
from cosmos_reasoner_ros.parameters.node import MIN_TRIGGER_PERIOD_S, NODE_PARAMETERS, NODE_RECORDS
from cosmos_reasoner_ros.parameters.record import Parameter
from cosmos_reasoner_ros.reasoner import MEDIA_FORMS, MediaForm
from cosmos_reasoner_ros.requests import BUSY_POLICIES, CHECK_NAMES, RequestScheduler
from cosmos_reasoner_ros.server.settings import ServerSettings

ALL = (*NODE_RECORDS, *CAMERA_RECORDS, *HANDOFF_RECORDS)
NO_CHECKS = "none"
CAMERAS = ("front", "wrist")
POINTS_TASKS = ("trajectory", "drive_path")
# Texts without NUL, commas, '?' or '#': the node's own rules on instruction and trigger_tasks, and a URL's
# query, are other tests' (test/node/test_parameters.py, test/parameters/test_server_url.py).
TEXT = st.text(alphabet="abcAB_z09 ./:@-", max_size=24)
URLS = ("http://127.0.0.1:8000/v1", "https://host/v1/", "https://u:p@host/v1", "ftp://host/v1", "host:8000")


def oracle_ok(record: Parameter, value: Any) -> bool:
    """Whether `value` is a valid value of `record`, from the record's fields alone."""
    kind = record.type
    if kind is bool:
        return type(value) is bool
    if kind is str:
        if type(value) is not str:
            return False
        if record.choices is not None and value not in record.choices:
            return False
        if record.name == "server_url":  # the URL rule: http(s), no user:password@ before the path
            authority = value.partition("://")[2].split("/", 1)[0]
            return value.startswith(("http://", "https://")) and "@" not in authority
        return True
    if kind is list:
        return type(value) in (list, tuple) and all(type(v) is str for v in value)
    if type(value) not in ((int,) if kind is int else (int, float)):
        return False
    if not math.isfinite(value):
        return False
    return record.range is None or record.range[0] <= value <= record.range[1]


def in_type(record: Parameter) -> st.SearchStrategy[Any]:
    """Values of the record's type: inside and around its range, its choices and other texts."""
    kind = record.type
    if kind is bool:
        return st.booleans()
    if kind is str:
        return TEXT | st.sampled_from((*(record.choices or ()), "", *URLS))
    if kind is list:
        return st.lists(st.sampled_from((*CHECK_NAMES, NO_CHECKS)), max_size=5) | st.lists(TEXT, max_size=3)
    low, high = record.range or (-1e9, 1e9)
    near = st.sampled_from((low, high, low - 1, high + 1, low * 2 - 1, high * 2 + 1))
    if kind is int:
        return st.integers(int(low) - 10, int(high) + 10) | near.map(int) | st.integers(-(2**63), 2**63 - 1)
    return (
        st.floats(low, high)
        | st.floats(allow_nan=True, allow_infinity=True)
        | near.map(float)
        | st.integers(int(low) - 2, int(high) + 2)
    )


def wrong_type(record: Parameter) -> st.SearchStrategy[Any]:
    others: dict[type, st.SearchStrategy[Any]] = {
        bool: st.booleans(),
        int: st.integers(-5, 5),
        float: st.floats(-5, 5),
        str: TEXT,
        list: st.lists(st.integers(0, 3), min_size=1, max_size=2),
    }
    if record.type is float:  # an integer is a number
        del others[int]
    return st.none() | st.one_of(*(s for kind, s in others.items() if kind is not record.type))


def values(record: Parameter) -> st.SearchStrategy[Any]:
    return in_type(record) | wrong_type(record)


def records_and_values(records: tuple[Parameter, ...]) -> st.SearchStrategy[tuple[Parameter, Any]]:
    return st.sampled_from(records).flatmap(lambda r: st.tuples(st.just(r), values(r)))


def checks_refused(names: list[str]) -> bool:
    """publish_checks' and handoff.checks' rule: check names, or [none] alone."""
    return any(v not in (*CHECK_NAMES, NO_CHECKS) for v in names) or (NO_CHECKS in names and len(names) > 1)


def named(problems: list[str], name: str) -> bool:
    return any(p.startswith(f"{name}: ") for p in problems)


@given(records_and_values(ALL))
@settings(max_examples=1500, deadline=None)
def test_the_records_checker_agrees_with_the_oracle(case: tuple[Parameter, Any]) -> None:
    record, value = case
    problem = record.problem(value)
    assert (problem is None) == oracle_ok(record, value), (record.name, value, problem)


def _node_rules_refuse(name: str, value: Any) -> bool:
    """The node's rules over several parameters, for one value of `name` on the shipped defaults."""
    defaults = default_config()
    if name == "trigger_period_s":
        return 0 < value < MIN_TRIGGER_PERIOD_S
    if name == "clip_seconds":
        return value > defaults.buffer_seconds
    if name == "buffer_seconds":
        return value < defaults.clip_seconds
    if name == "media_dir":
        return value == ""  # inline_media is false
    if name == "publish_checks":
        return checks_refused(value)
    return False


@given(records_and_values(tuple(r for r in NODE_RECORDS if r.name != "cameras")))
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_nodes_validation_agrees_with_the_oracle(case: tuple[Parameter, Any]) -> None:
    record, value = case
    problems = validate(default_config(**{record.name: value}))
    ok = oracle_ok(record, value)
    if not ok:
        assert named(problems, record.name), (record.name, value, problems)
    refused = not ok or _node_rules_refuse(record.name, value)
    assert (problems == []) == (not refused), (record.name, value, problems)


@given(records_and_values(CAMERA_RECORDS))
@settings(max_examples=500, deadline=None)
def test_a_cameras_validation_agrees_with_the_oracle(case: tuple[Parameter, Any]) -> None:
    record, value = case
    camera = dataclasses.replace(CameraConfig("front", "/front/image_raw"), **{record.name: value})
    problems = validate(default_config(cameras=(camera,)))
    ok = oracle_ok(record, value)
    assert named(problems, f"camera.front.{record.name}") == (not ok), (record.name, value, problems)
    if ok:  # depth_topic and camera_info_topic go together
        paired = bool(camera.depth_topic) == bool(camera.camera_info_topic)
        assert (problems == []) == paired, (record.name, value, problems)


def _handoff_rules_refuse(base: HandoffSettings, name: str, value: Any) -> bool:
    """The handoff's rules over several parameters, for one value of `name` on `base` (handed off, valid)."""
    if name == "camera_height_m":
        return not value > 0
    if name == "min_path_length_m":
        return value > base.max_path_length_m
    if name == "max_path_length_m":
        return value < base.min_path_length_m
    if name == "path_valid_frame":
        return base.validate_path and value == ""
    if name == "camera":
        return value != "" and value not in CAMERAS
    if name == "tasks":
        tasks = [t.strip() for t in value.split(",") if t.strip()]
        return not tasks or any(t not in POINTS_TASKS for t in tasks)
    if name == "checks":
        return checks_refused(value)
    return False


@given(records_and_values(HANDOFF_RECORDS))
@settings(max_examples=1500, deadline=None)
def test_the_handoffs_validation_agrees_with_the_oracle(case: tuple[Parameter, Any]) -> None:
    record, value = case
    base = handoff_settings()
    problems = settings_problems(dataclasses.replace(base, **{record.name: value}), CAMERAS, POINTS_TASKS)
    ok = oracle_ok(record, value)
    if record.name == "mode" and value == "none":
        assert problems == []  # off: nothing is checked
        return
    refused = not ok or _handoff_rules_refuse(base, record.name, value)
    assert (problems == []) == (not refused), (record.name, value, problems)
    if not ok:
        assert named(problems, f"handoff.{record.name}"), (record.name, value, problems)


def test_the_defaults_are_valid_and_the_records_refuse_bad_tables() -> None:
    assert validate(default_config()) == [] and settings_problems(HandoffSettings(), (), ()) == []
    with pytest.raises(ValueError, match=r"its default 700\.0 must be in"):
        Parameter("clip", float, 700.0, "length", unit="s", range=(0.05, 600.0))
    with pytest.raises(TypeError, match="only text has choices"):
        Parameter("n", int, 1, "count", choices=("1",))


def test_what_the_records_hold_that_others_use_agrees() -> None:
    """The owners export the records' values; model_family's table has one family per name of the record's
    choices, and the server's settings default to the node's media folder."""
    node = {r.name: r for r in NODE_RECORDS}
    handoff = {r.name: r for r in HANDOFF_RECORDS}
    assert node["media_form"].choices == MEDIA_FORMS == ("auto", "video", "frames")
    assert node["model_family"].choices == (AUTO, *FAMILY_NAMES) and node["model_family"].default == AUTO
    assert tuple(FAMILIES) == FAMILY_NAMES and all(FAMILIES[n].name == n for n in FAMILY_NAMES)
    assert node["busy_policy"].choices == BUSY_POLICIES == ("reject", "replace")
    assert tuple(node["publish_checks"].default) == CHECK_NAMES == tuple(handoff["checks"].default)
    assert node["media_dir"].default == ServerSettings.media_dir == "/tmp/cosmos_reasoner/media"


# Values around a choice: the record's choices, near misses, other texts and other types.
CHOICE_VALUES = (
    st.sampled_from(("auto", "video", "frames", "reject", "replace", "nano", "super", "edge", "qwen3_vl"))
    | st.sampled_from(("Auto", "video ", "", "none", "qwen3", "frame"))
    | TEXT
    | st.none()
    | st.integers(-2, 2)
)


@given(CHOICE_VALUES)
@settings(max_examples=300, deadline=None)
def test_media_form_refuses_exactly_what_its_record_refuses(value: Any) -> None:
    record = NODE_PARAMETERS["media_form"]
    accepted = type(value) is str and value in ("auto", "video", "frames")
    assert (record.problem(value) is None) == accepted, value
    if accepted:
        assert MediaForm(value).form == value
    else:
        with pytest.raises(ValueError, match=r"^media_form must be "):
            MediaForm(value)


@given(CHOICE_VALUES)
@settings(max_examples=100, deadline=None)
def test_the_scheduler_refuses_exactly_the_busy_policies_its_record_refuses(value: Any) -> None:
    record = NODE_PARAMETERS["busy_policy"]
    accepted = type(value) is str and value in ("reject", "replace")
    assert (record.problem(value) is None) == accepted, value
    if not accepted:
        with pytest.raises(ValueError, match=r"^busy_policy must be "):
            RequestScheduler(lambda _job, _report: (), lambda _job, _outcome: None, busy_policy=value)
        return
    scheduler = RequestScheduler(lambda _job, _report: (), lambda _job, _outcome: None, busy_policy=value)
    try:
        assert scheduler.busy_policy == value
    finally:
        scheduler.shutdown(5.0)


@given(CHOICE_VALUES.filter(lambda v: isinstance(v, str)))
@settings(max_examples=300, deadline=None)
def test_model_family_takes_exactly_the_records_choices_but_auto(value: str) -> None:
    record = NODE_PARAMETERS["model_family"]
    named = value in ("nano", "super", "edge", "qwen3_vl")
    assert (record.problem(value) is None) == (named or value == "auto"), value
    if named:
        assert family(value).name == value
    else:
        with pytest.raises(TaskError, match="model_family must be one of"):
            family(value)


@pytest.mark.parametrize(
    ("config", "records"),
    [
        (NodeConfig, tuple(r for r in NODE_RECORDS if r.name != "cameras")),
        (CameraConfig, CAMERA_RECORDS),
        (HandoffSettings, HANDOFF_RECORDS),
    ],
)
def test_each_record_is_a_field_of_its_configuration_of_its_type(config: type, records: tuple) -> None:
    """The frozen configurations the node reads hold a field per record, of the record's type (a list as a
    list or tuple of names)."""
    annotations = {f.name: f.type for f in dataclasses.fields(config)}
    shown = {
        bool: ("bool",),
        int: ("int",),
        float: ("float",),
        str: ("str",),
        list: ("list[str]", "tuple[str, ...]"),
    }
    for record in records:
        found = annotations.get(record.name)
        assert found in shown[record.type], (config.__name__, record.name, found)
    assert set(annotations) - {r.name for r in records} <= {"cameras", "name"}
