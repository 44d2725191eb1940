"""launch_config passes the facts of the server it starts to the node (issue 40): a profile whose vLLM args
say --limit-mm-per-prompt with "video": 0 starts the node in frames form at the profile's image limit, and a
server in mode edge makes the node ask with model_family edge. The node's parameters are then valid."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.configs import default_config

from cosmos_reasoner_ros import launch_config as lc
from cosmos_reasoner_ros.node.parameters import validate
from cosmos_reasoner_ros.package_files import config_file

FACTS = ("model_family", "media_form", "max_image_frames")


def _facts(plan: lc.LaunchPlan) -> dict[str, Any]:
    return {k: v for k, v in plan.node.overrides.items() if k in FACTS}


def _valid_for_the_node(overrides: dict[str, Any]) -> None:
    known = {f.name for f in dataclasses.fields(default_config())}
    assert set(overrides) <= known
    assert validate(default_config(**overrides)) == []


def test_the_thor_nano_nvfp4_profile_starts_the_node_in_frames_form() -> None:
    profile = config_file("server_thor_nano_nvfp4.yaml")
    plan = lc.plan({"server_config": str(profile)})
    assert plan.supervisor is not None
    facts = _facts(plan)
    # NVIDIA's recipe: '{"image":1,"video":0}': frames from the first request, one image per prompt.
    assert facts == {"media_form": "frames", "max_image_frames": 1}
    _valid_for_the_node(facts)


def test_the_thor_edge_profile_makes_the_node_ask_as_edge() -> None:
    plan = lc.plan({"server_config": str(config_file("server_thor_edge.yaml"))})
    assert _facts(plan) == {"model_family": "edge"}
    _valid_for_the_node(_facts(plan))


def test_the_mode_argument_over_the_profile() -> None:
    assert _facts(lc.plan({"mode": "edge"})) == {"model_family": "edge"}
    edge = str(config_file("server_thor_edge.yaml"))
    assert _facts(lc.plan({"server_config": edge, "mode": "native"})) == {}
    assert _facts(lc.plan({"mode": "qwen3vl"})) == {"model_family": "qwen3_vl"}


def test_the_shipped_server_config_and_an_external_server_pass_no_facts() -> None:
    assert _facts(lc.plan({})) == {}
    # A server the launch file does not start: nothing known of it (the node learns from its answers).
    profile = str(config_file("server_thor_nano_nvfp4.yaml"))
    external = lc.plan({"start_server": "false", "server_config": profile, "mode": "edge"})
    assert _facts(external) == {}


@pytest.mark.parametrize(
    ("extra_args", "expected"),
    [
        (
            ["--limit-mm-per-prompt", '{"image": 8, "video": 0}'],
            {"media_form": "frames", "max_image_frames": 8},
        ),
        (['--limit-mm-per-prompt={"video":0,"image":4}'], {"media_form": "frames", "max_image_frames": 4}),
        (["--limit-mm-per-prompt", '{"video": 0}'], {"media_form": "frames"}),
        (
            ["--limit-mm-per-prompt", '{"image": 1000, "video": 0}'],
            {"media_form": "frames", "max_image_frames": 256},
        ),
        (["--limit-mm-per-prompt", '{"image": 1, "video": 1}'], {}),
        (["--seed", "7"], {}),
        (["--limit-mm-per-prompt", "not json"], {}),
        (["--limit-mm-per-prompt"], {}),
        # the last one counts, as in vLLM's argument parser
        (
            ["--limit-mm-per-prompt", '{"video": 0}', "--limit-mm-per-prompt", '{"video": 2}'],
            {},
        ),
    ],
)
def test_limit_mm_per_prompt_forms(tmp_path: Path, extra_args: list[str], expected: dict[str, Any]) -> None:
    config = tmp_path / "server.yaml"
    config.write_text(yaml.safe_dump({"mode": "native", "model": "/m", "extra_args": extra_args}))
    facts = _facts(lc.plan({"server_config": str(config)}))
    assert facts == expected
    _valid_for_the_node(facts)


def test_an_unreadable_server_config_passes_no_facts(tmp_path: Path) -> None:
    bad = tmp_path / "server.yaml"
    bad.write_text("mode: [unclosed")
    assert lc.server_facts(str(bad)) == {}
    assert lc.server_facts(str(tmp_path / "missing.yaml")) == {}
    bad.write_text(json.dumps(["a", "list"]))
    assert lc.server_facts(str(bad)) == {}
