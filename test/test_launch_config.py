"""launch_config: the launch file's arguments, their resolution, the supervisor and node processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from cosmos_reasoner_ros import launch_config as lc
from cosmos_reasoner_ros.server import cli
from cosmos_reasoner_ros.server.settings import ServerSettings


def supervisor_settings(plan: lc.LaunchPlan) -> ServerSettings:
    """What the supervisor process of a plan would run with: its argv parsed by the supervisor itself."""
    assert plan.supervisor is not None
    cmd = list(plan.supervisor.cmd)
    assert cmd[:3] == [sys.executable, "-m", "cosmos_reasoner_ros.server"]
    return cli.settings_from_args(cli.parse_args(cmd[3:]))


def test_defaults_start_the_supervisor_and_the_node_with_shipped_files() -> None:
    plan = lc.plan({})
    settings = supervisor_settings(plan)
    assert settings.port == 8000 and settings.host == "127.0.0.1"
    assert settings.media_dir == "/tmp/cosmos_reasoner/media"
    assert settings.mode == "plugin" and settings.model == "nvidia/Cosmos3-Nano"  # from config/server.yaml
    assert plan.node.package == "cosmos_reasoner_ros" and plan.node.executable == "reasoner_node"
    params_file = Path(plan.node.params_file)
    assert params_file.name == "reasoner.yaml" and params_file.exists()
    # The node name matches the parameter file's top-level key, or the node would ignore the file.
    assert plan.node.name in yaml.safe_load(params_file.read_text())
    assert plan.node.parameters == [
        str(params_file),
        {"server_url": "http://127.0.0.1:8000/v1", "media_dir": "/tmp/cosmos_reasoner/media"},
    ]
    assert plan.supervisor is not None and plan.supervisor.sigterm_timeout_s > ServerSettings().stop_grace_s


def test_server_arguments_reach_the_supervisor() -> None:
    plan = lc.plan(
        {
            "model": "/models/nano",
            "mode": "native",
            "tensor_parallel_size": "4",
            "gpus": "0,1,2,3",
            "port": "8100",
            "media_dir": "/data/media",
        }
    )
    settings = supervisor_settings(plan)
    assert (settings.model, settings.mode, settings.tensor_parallel_size) == ("/models/nano", "native", 4)
    assert (settings.gpus, settings.port, settings.media_dir) == ("0,1,2,3", 8100, "/data/media")
    # The node talks to that server and reads/writes the same media directory.
    assert plan.node.overrides["server_url"] == "http://127.0.0.1:8100/v1"
    assert plan.node.overrides["media_dir"] == "/data/media"


def test_server_config_file_is_passed(tmp_path: Path) -> None:
    config = tmp_path / "server.yaml"
    config.write_text(yaml.safe_dump({"mode": "qwen3vl", "model": "/m", "enforce_eager": True}))
    settings = supervisor_settings(lc.plan({"server_config": str(config), "port": "9000"}))
    assert (settings.mode, settings.model, settings.enforce_eager, settings.port) == (
        "qwen3vl",
        "/m",
        True,
        9000,
    )


def test_external_server_starts_no_supervisor() -> None:
    plan = lc.plan({"start_server": "false", "server_url": "http://gpu-host:8000/v1"})
    assert plan.supervisor is None
    assert plan.node.overrides["server_url"] == "http://gpu-host:8000/v1"


def test_cameras_and_params_file_override_the_node(tmp_path: Path) -> None:
    params = tmp_path / "robot.yaml"
    plan = lc.plan({"cameras": "front, wrist,", "params_file": str(params), "start_server": "False"})
    assert plan.node.params_file == str(params)
    assert plan.node.overrides["cameras"] == ["front", "wrist"]


def test_cameras_size_the_servers_media_limit_and_the_version_reaches_it() -> None:
    plan = lc.plan({"cameras": "front,wrist,left", "vllm_version": "0.26.0"})
    settings = supervisor_settings(plan)
    assert settings.cameras == 3 and settings.vllm_version == "0.26.0"
    assert supervisor_settings(lc.plan({})).cameras == 0  # the node's own cameras: vLLM's default limit


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"start_server": "maybe"}, "start_server"),
        ({"port": "http"}, "port"),
        ({"port": "70000"}, "port"),
        ({"tensor_parallel_size": "0"}, "tensor_parallel_size"),
        ({"mode": "external"}, "mode"),
        ({"gpus": "first"}, "gpus"),
        ({"server_url": "gpu-host:8000"}, "server_url"),
        ({"server_url": "http://robot:s3cr3t@gpu-host:8000/v1"}, "server_url: must not contain credentials"),
        ({"camera": "front"}, "camera"),
    ],
)
def test_invalid_arguments_name_the_argument(values: dict[str, str], named: str) -> None:
    with pytest.raises(lc.LaunchArgumentError, match=named) as err:
        lc.plan(values)
    assert "s3cr3t" not in str(err.value)


def test_every_argument_is_described_and_unique() -> None:
    assert len(set(lc.ARGUMENT_NAMES)) == len(lc.ARGUMENTS)
    assert all(a.description for a in lc.ARGUMENTS)
    assert set(lc.ARGUMENT_NAMES) >= {
        "model",
        "mode",
        "tensor_parallel_size",
        "gpus",
        "port",
        "start_server",
        "server_url",
        "media_dir",
        "params_file",
        "cameras",
    }


def test_lifecycle_argument_starts_a_managed_node() -> None:
    assert not lc.plan({}).node.lifecycle
    managed = lc.plan({"lifecycle": "true"}).node
    assert managed.lifecycle and managed.overrides["lifecycle"] is True and managed.action == "lifecycle_node"
    assert lc.plan({}).node.action == "node"
    with pytest.raises(lc.LaunchArgumentError, match="lifecycle: expected true or false"):
        lc.plan({"lifecycle": "maybe"})


def test_handoff_arguments_become_the_node_s_handoff_parameters() -> None:
    """Only the arguments given override params_file; the node validates the whole handoff at start."""
    assert not any(k.startswith("handoff.") for k in lc.plan({}).node.overrides)
    plan = lc.plan(
        {
            "handoff": "follow_path",
            "camera_height_m": "0.42",
            "camera_pitch_deg": "-5",
            "handoff_action": "/robot1/follow_path",
            "controller_id": "FollowPath",
            "goal_checker_id": "precise_goal_checker",
            "progress_checker_id": "progress_checker",
            "validate_path": "true",
            "confirm": "no",
        }
    )
    assert {k: v for k, v in plan.node.overrides.items() if k.startswith("handoff.")} == {
        "handoff.mode": "follow_path",
        "handoff.camera_height_m": 0.42,
        "handoff.camera_pitch_deg": -5.0,
        "handoff.action_name": "/robot1/follow_path",
        "handoff.controller_id": "FollowPath",
        "handoff.goal_checker_id": "precise_goal_checker",
        "handoff.progress_checker_id": "progress_checker",
        "handoff.validate_path": True,
        "handoff.confirm": False,
    }
    from cosmos_reasoner_ros.handoff import MODES

    assert lc.HANDOFF_MODES == MODES  # both read the record (parameters/handoff.py)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"handoff": "drive"}, "handoff: one of none, dry_run, follow_path, navigate_to_pose"),
        ({"camera_height_m": "high"}, "camera_height_m: expected a number"),
        ({"camera_pitch_deg": "nan"}, "camera_pitch_deg: expected a finite number"),
        ({"confirm": "maybe"}, "confirm: expected true or false"),
    ],
)
def test_bad_handoff_arguments_are_named(values: dict, message: str) -> None:
    with pytest.raises(lc.LaunchArgumentError, match=message):
        lc.plan(values)
