"""The handoff's parameters: read through the node's declare callback, documented once each in
config/reasoner.yaml, off by default and then never checked, and every problem named by its parameter."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.handoff_answers import settings as good_settings
from support.paths import REASONER_YAML

from cosmos_reasoner_ros.handoff import HANDOFF_PARAMETERS, HandoffSettings, read_settings, settings_problems

CAMERAS = ("front", "wrist")
POINTS_TASKS = ("trajectory", "drive_path")


def test_read_through_declare_with_the_documented_defaults() -> None:
    declared: dict[str, Any] = {}

    def declare(name: str, default: Any, doc: str) -> Any:
        assert doc and name.startswith("handoff.")
        declared[name] = default
        return default

    assert read_settings(declare) == HandoffSettings()
    assert list(declared) == [f"handoff.{n}" for n in HANDOFF_PARAMETERS]
    documented = yaml.safe_load(REASONER_YAML.read_text())["reasoner_node"]["ros__parameters"]["handoff"]
    assert set(documented) == set(HANDOFF_PARAMETERS)
    lines = REASONER_YAML.read_text().splitlines()
    block = lines[lines.index("    handoff:") :]
    for name, value in documented.items():
        default = HANDOFF_PARAMETERS[name][0]
        assert value == default, (
            f"handoff.{name}: config/reasoner.yaml says {value!r}, the schema {default!r}"
        )
        assert type(value) is type(default) or (isinstance(default, float) and isinstance(value, int)), name
        line = next(line for line in block if line.strip().startswith(f"{name}:"))
        assert "#" in line, f"handoff.{name} has no comment in {REASONER_YAML.name}"


def test_off_is_never_checked_and_on_needs_the_camera_height() -> None:
    assert HandoffSettings().mode == "none"
    assert settings_problems(HandoffSettings(camera_height_m=-5.0, tasks=""), CAMERAS, POINTS_TASKS) == []
    on = dataclasses.replace(HandoffSettings(), mode="dry_run")
    (problem,) = settings_problems(on, CAMERAS, POINTS_TASKS)
    assert problem.startswith("handoff.camera_height_m: set it")
    assert settings_problems(good_settings(), CAMERAS, POINTS_TASKS) == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"mode": "drive"}, "handoff.mode: must be one of none, dry_run, follow_path, navigate_to_pose"),
        ({"camera": "rear"}, "handoff.camera: 'rear' is not one of the cameras (front, wrist)"),
        ({"tasks": "caption"}, "handoff.tasks: 'caption' is not a task answering points"),
        ({"tasks": " , "}, "handoff.tasks: name at least one task"),
        ({"checks": ("max_step", "none")}, "handoff.checks: names from"),
        ({"on_refusal": "stop"}, "handoff.on_refusal: must be one of keep, cancel"),
        ({"camera_pitch_deg": 90.0}, "handoff.camera_pitch_deg: must be in [-89, 89]"),
        ({"max_age_s": math.nan}, "handoff.max_age_s: must be a finite number"),
        ({"agreement_answers": 9}, "handoff.agreement_answers: must be in [1, 8]"),
        ({"path_spacing_m": 0.0}, "handoff.path_spacing_m: must be in [0.01, 10]"),
    ],
)
def test_each_problem_names_its_parameter(change: dict, words: str) -> None:
    problems = settings_problems(good_settings(**change), CAMERAS, POINTS_TASKS)
    assert any(p.startswith(words) for p in problems), problems


@given(
    st.fixed_dictionaries(
        {
            "camera_height_m": st.floats(allow_nan=True, allow_infinity=True),
            "camera_pitch_deg": st.floats(allow_nan=True, allow_infinity=True),
            "path_spacing_m": st.floats(allow_nan=True, allow_infinity=True),
            "max_range_m": st.floats(allow_nan=True, allow_infinity=True),
        }
    )
)
@settings(max_examples=200, deadline=None)
def test_accepted_settings_always_make_a_handoff(values: dict) -> None:
    """Whatever numbers come, settings without problems build the handoff (its plane, its limits)."""
    from cosmos_reasoner_ros.handoff import Handoff

    chosen = good_settings(**values)
    if not settings_problems(chosen, CAMERAS, POINTS_TASKS):
        Handoff(chosen)


def test_the_readme_table_lists_every_handoff_parameter_with_its_default() -> None:
    from support.paths import ROOT

    rows = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `handoff.")]
    table = {row.split("`")[1].removeprefix("handoff."): row.split("`")[3] for row in rows}
    assert list(table) == list(HANDOFF_PARAMETERS)
    for name, shown in table.items():
        value = "" if shown == '""' else yaml.safe_load(shown)
        assert value == HANDOFF_PARAMETERS[name][0], name
