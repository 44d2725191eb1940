"""parameters: the schema matches config/reasoner.yaml, and validate() names every bad value (also non-finite
numbers and values that would flood the node), without ROS."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from support.configs import default_config
from support.paths import REASONER_YAML

from cosmos_reasoner_ros.node.parameters import (
    CAMERA_PARAMETERS,
    PARAMETERS,
    RANGES,
    CameraConfig,
    secret_problems,
    validate,
)


def test_the_defaults_are_valid() -> None:
    assert validate(default_config()) == []


@pytest.mark.parametrize("name", sorted(RANGES))
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, -1e300, 1e300])
def test_every_numeric_parameter_is_finite_and_in_range(name: str, bad: float) -> None:
    default = PARAMETERS[name][0]
    value: Any = bad if isinstance(default, float) else (int(1e18) if bad > 0 else -int(1e18))
    if isinstance(default, int) and not math.isfinite(bad):
        return  # integers cannot be infinite or NaN
    problems = validate(default_config(**{name: value}))
    assert any(p.startswith(f"{name}:") for p in problems), (name, value, problems)


def test_the_values_that_broke_the_node_are_refused_with_their_name() -> None:
    # buffer_seconds inf crashed with OverflowError; a 1 us timer gave 1,339 busy results in 3 s.
    problems = validate(default_config(buffer_seconds=math.inf, trigger_period_s=1e-6))
    assert any("buffer_seconds: must be a finite number" in p for p in problems)
    assert any("trigger_period_s: must be 0 (off) or at least 0.05 s" in p for p in problems)
    assert validate(default_config(trigger_period_s=0.0)) == []  # 0: the timer is off


def test_choices_cameras_and_instruction() -> None:
    cfg = default_config(
        busy_policy="sometimes",
        codec="av1",
        cameras=(CameraConfig("front", "/a"), CameraConfig("front", "/b"), CameraConfig("wrist cam", "/c")),
        instruction="x" * 3000,
    )
    text = "\n".join(validate(cfg))
    assert "busy_policy: must be one of reject, replace, got 'sometimes'" in text
    assert "codec: must be one of auto, h264, mp4v" in text
    assert "cameras: names must be unique" in text and "'wrist cam' is not a valid name" in text
    assert "instruction: 3000 characters, more than max_instruction_chars (2000)" in text
    assert "instruction: contains a NUL" in "\n".join(validate(default_config(instruction="a\x00b")))
    depth_only = (CameraConfig("front", "/a", depth_topic="/d"),)
    assert any(
        "depth_topic and camera_info_topic go together" in p
        for p in validate(default_config(cameras=depth_only))
    )


def test_every_parameter_is_in_the_shipped_yaml_with_a_comment() -> None:
    params = yaml.safe_load(REASONER_YAML.read_text())["reasoner_node"]["ros__parameters"]
    cameras = params.pop("camera")
    params.pop("handoff")  # the Nav2 handoff's own schema: test/handoff/test_settings.py
    assert set(params) == set(PARAMETERS)
    for name in params["cameras"]:
        assert set(cameras[name]) == set(CAMERA_PARAMETERS)
    lines = REASONER_YAML.read_text().splitlines()
    for name in [*PARAMETERS, *CAMERA_PARAMETERS]:
        line = next(line for line in lines if line.strip().startswith(f"{name}:"))
        assert "#" in line, f"{name} has no comment in {REASONER_YAML.name}"
    for name, (default, _doc) in PARAMETERS.items():
        assert params[name] == default, name  # the YAML shows the real defaults
        assert type(params[name]) is type(default) or (
            isinstance(default, float) and isinstance(params[name], int)
        )


def test_trigger_tasks_and_publish_checks() -> None:
    cfg = default_config(trigger_tasks=" next_action, ,trajectory ")
    assert cfg.trigger_task_names() == ("next_action", "trajectory") and validate(cfg) == []
    assert default_config().trigger_task_names() == ("next_action",)  # empty: the task parameter
    many = validate(default_config(trigger_tasks=",".join(["caption"] * 9)))
    assert many == ["trigger_tasks: at most 8 tasks, got 9"]
    assert validate(default_config(publish_checks=["none"])) == []
    assert validate(default_config(publish_checks=["max_step"])) == []
    for bad in (["max_step", "none"], ["straightness"]):
        problems = validate(default_config(publish_checks=bad))
        assert len(problems) == 1 and problems[0].startswith("publish_checks: names from points_in_image")
    assert any(p.startswith("min_depth_fraction:") for p in validate(default_config(min_depth_fraction=1.5)))
    assert any(p.startswith("max_step_m:") for p in validate(default_config(max_step_m=0.0)))


def test_secrets_are_found_in_the_overrides_before_anything_is_declared() -> None:
    assert secret_problems({}) == []
    assert secret_problems({"server_url": "http://127.0.0.1:8000/v1", "task": "x"}) == []
    assert secret_problems({"server_url": 8000}) == []  # a wrong type is validate's to name
    (problem,) = secret_problems({"server_url": "https://u:p@ss@host/v1"})
    assert problem.startswith("server_url: must not contain credentials") and "p@ss" not in problem
