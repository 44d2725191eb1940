"""node/core: the user's own task schemas compiled at start by the grammar backends of the node's Python (the
robot's ROS environment usually has none: then a note says so, once)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from support import vllm_tier

from cosmos_reasoner_ros.node import core
from cosmos_reasoner_ros.reasoner import TaskCatalog

TASK = {"media": "image", "reasoning": False, "answer_kind": "text", "profile": "default"}
# A backreference: vLLM's xgrammar front end refuses it (HTTP 400 for every such request).
BACKREF = {
    "type": "object",
    "properties": {"w": {"type": "string", "pattern": "^(a)\\1$"}},
    "required": ["w"],
}


def _catalog(tmp_path: Path, tasks: dict) -> TaskCatalog:
    user = tmp_path / "tasks.yaml"
    user.write_text(yaml.safe_dump({"tasks": tasks}))
    return TaskCatalog.load(user)


def test_the_shipped_catalog_needs_no_check_here() -> None:
    assert core.user_schema_check(TaskCatalog.load()) == ([], [])


def test_without_a_backend_the_note_says_what_was_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core.importlib.util, "find_spec", lambda name: None)
    changed = copy.deepcopy(TaskCatalog.load().spec("grounding_2d").json_schema)
    assert changed is not None
    changed["maxItems"] = 3
    catalog = _catalog(
        tmp_path, {"grounding_2d": {"json_schema": changed}, "plain": {"template": "x", **TASK}}
    )
    problems, notes = core.user_schema_check(catalog)
    assert problems == [] and len(notes) == 1
    assert notes[0].startswith("structured output: the json_schema of grounding_2d (tasks_file) was checked")
    assert "neither xgrammar nor llguidance" in notes[0]


@pytest.mark.grammar
@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_with_a_backend_a_schema_it_cannot_use_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in a node whose Python has xgrammar (here: the vLLM environment's, 0.2.8)."""
    monkeypatch.setattr(
        core.importlib.util, "find_spec", lambda name: object() if name == "xgrammar" else None
    )
    monkeypatch.setattr(core.sys, "executable", str(vllm_tier.vllm_python()))
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "_ROS_WHEELS_BOOTSTRAP_COMPLETE", "VIRTUAL_ENV"):
        monkeypatch.delenv(name, raising=False)
    catalog = _catalog(tmp_path, {"counting": {"template": "How many?", "json_schema": BACKREF, **TASK}})
    problems, notes = core.user_schema_check(catalog)
    assert notes == [] and len(problems) == 2  # free and no whitespace
    assert problems[0].startswith("tasks_file: task counting: its json_schema refused by vLLM's front end")
    assert "with xgrammar 0.2.8" in problems[0] and "Backreference is not supported" in problems[0]
