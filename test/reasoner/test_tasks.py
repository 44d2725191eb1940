"""The task catalog: the shipped file, rendering, validation at load time, user files merged over it."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.paths import ROOT

from cosmos_reasoner_ros import package_files
from cosmos_reasoner_ros.errors import TaskError
from cosmos_reasoner_ros.reasoner.tasks import (
    SamplingProfile,
    TaskCatalog,
    shipped_tasks_path,
    template_placeholders,
)

PROFILE = {
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
    "repetition_penalty": 1.0,
    "presence_penalty": 1.5,
    "max_tokens": 64,
}
EXPECTED = {
    "next_action": ("video", True, "text"),
    "assisted_next_action": ("video", True, "text"),
    "trajectory": ("image", True, "points"),
    "drive_path": ("image", True, "points"),
    "grounding_2d": ("image", False, "boxes"),
    "region_captions": ("image", False, "regions"),
    "temporal_localization": ("video", False, "segments"),
    "temporal_localization_mmss": ("video", False, "segments"),
    "timestamp_query": ("video", False, "segments"),
    "plausibility": ("video", True, "choice"),
    "common_sense": ("video", True, "text"),
    "caption": ("video", False, "text"),
    "image_caption": ("image", False, "text"),
    "planning": ("image", False, "text"),
    "custom": ("video", True, "text"),
}


@pytest.fixture(scope="module")
def catalog() -> TaskCatalog:
    return TaskCatalog.load()


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_shipped_catalog_has_every_task(catalog: TaskCatalog) -> None:
    assert shipped_tasks_path() == ROOT / "config" / "tasks.yaml"
    assert set(EXPECTED) <= set(catalog.names())
    for name, (media, reasoning, kind) in EXPECTED.items():
        spec = catalog.spec(name)
        assert (spec.media, spec.reasoning, spec.answer_kind) == (media, reasoning, kind), name
        assert spec.sampling == catalog.profiles[spec.profile] or spec.sampling.max_tokens != 4096


def test_drive_path_is_the_trajectory_prompt_for_a_base_with_its_form_and_schema(
    catalog: TaskCatalog,
) -> None:
    """The mobile robots' task (the Nav2 handoff's): the cookbook's trajectory prompt about the robot's path
    on the floor, the same JSON form, the same schema, sampling and priority as trajectory."""
    drive, trajectory = catalog.spec("drive_path"), catalog.spec("trajectory")
    assert drive.json_schema == trajectory.json_schema is not None
    assert (drive.sampling, drive.priority, drive.reasoning_format) == (
        trajectory.sampling,
        trajectory.priority,
        trajectory.reasoning_format,
    )
    prompt = catalog.render("drive_path", task="go to the door").prompt
    assert prompt.startswith('You are given the task "go to the door". Specify the 2D trajectory the robot')
    assert "floor" in prompt and "pixel space" in prompt
    assert prompt.endswith('{"point_2d": [x, y], "label": "robot path"}.')


def test_cookbook_sampling_profiles(catalog: TaskCatalog) -> None:
    assert catalog.profiles["reasoning"] == SamplingProfile(0.6, 0.95, 20, 1.0, 0.0, 4096)
    assert catalog.profiles["default"] == SamplingProfile(0.7, 0.8, 20, 1.0, 1.5, 4096)
    assert catalog.spec("next_action").sampling == catalog.profiles["reasoning"]
    assert catalog.spec("grounding_2d").sampling.temperature == 0.7
    assert catalog.spec("grounding_2d").sampling.max_tokens == 1024  # the task's override


def test_render_fills_placeholders_with_literal_braces(catalog: TaskCatalog) -> None:
    rendered = catalog.render("trajectory", task="pick up the red cup")
    assert rendered.prompt.startswith(
        'You are given the task "pick up the red cup". Specify the 2D trajectory'
    )
    assert rendered.prompt.endswith('{"point_2d": [x, y], "label": "gripper trajectory"}.')
    assert (rendered.media, rendered.reasoning, rendered.answer_kind) == ("image", True, "points")
    assert rendered.json_schema is not None and rendered.json_schema["type"] == "array"
    assert catalog.render("next_action").prompt == "What can be the next immediate action?"
    assisted = catalog.render("assisted_next_action", task="make coffee", step="open the lid")
    assert assisted.prompt == (
        'This is the overall task that the agent is trying to complete: "make coffee".\n'
        "In the video, the agent is trying to follow the instruction (a single step out of many to complete "
        'the overall task): "open the lid".\nWhat should be the next action of the agent?'
    )
    query = catalog.render("timestamp_query", event="the gripper closes").prompt
    assert query.startswith('When is "the gripper closes" depicted in the video?')
    assert "```json\n[\n{\n" in catalog.render("temporal_localization").prompt  # literal braces survive
    assert (
        catalog.render("grounding_2d", object="the mug").prompt
        == "Locate the bounding box of the mug. Return a json."
    )
    assert catalog.render("custom", prompt="Is the {door} open?").prompt == "Is the {door} open?"


def test_render_ignores_unused_values_and_uses_defaults(catalog: TaskCatalog) -> None:
    plain = catalog.render("plausibility")
    assert plain.prompt.startswith("Is this video physically plausible/possible")
    assert plain.prompt.endswith("\n(A) Possible\n(B) Impossible")
    asked = catalog.render(
        "plausibility", question="Which happens next?", options="A. falls\nB. rolls\nC. stops"
    )
    assert asked.prompt.startswith("Which happens next?\nA. falls\nB. rolls\nC. stops")
    assert (
        catalog.render("next_action", instruction="unused").prompt == "What can be the next immediate action?"
    )


def test_render_errors_before_any_request(catalog: TaskCatalog) -> None:
    with pytest.raises(TaskError, match="unknown task 'fly'"):
        catalog.render("fly")
    with pytest.raises(TaskError, match="'object'"):
        catalog.render("grounding_2d")
    with pytest.raises(TaskError, match="'task', 'step'"):
        catalog.render("assisted_next_action")
    with pytest.raises(TaskError, match="'prompt'"):
        catalog.render("custom", prompt="   ")
    with pytest.raises(TaskError, match="must be a string"):
        catalog.render("grounding_2d", object=3)  # type: ignore[arg-type]


def test_rendered_schema_is_a_copy(catalog: TaskCatalog) -> None:
    first = catalog.render("grounding_2d", object="x")
    assert first.json_schema is not None
    first.json_schema["type"] = "mutated"
    assert catalog.render("grounding_2d", object="x").json_schema["type"] == "array"  # type: ignore[index]


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ('Return {"point_2d": [x, y]}', "not a plain name"),
        ("Unbalanced { brace", "literal braces"),
        ("Positional {}", "not a plain name"),
        ("Attribute {a.b}", "not a plain name"),
        ("Index {a[0]}", "not a plain name"),
        ("Spec {a:>10}", "format spec"),
        ("Conversion {a!r}", "conversion"),
    ],
)
def test_bad_templates_fail_at_load(tmp_path: Path, template: str, message: str) -> None:
    user = _write(
        tmp_path / "t.yaml",
        {
            "tasks": {
                "mine": {
                    "template": template,
                    "media": "video",
                    "reasoning": False,
                    "answer_kind": "text",
                    "profile": "default",
                }
            }
        },
    )
    with pytest.raises(TaskError, match=message):
        TaskCatalog.load(user)


def test_placeholders_in_order_without_repeats() -> None:
    assert template_placeholders("{b} and {a} then {b} {{literal}}") == ("b", "a")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"media": "audio"}, "media must be one of"),
        ({"answer_kind": "poem"}, "answer_kind must be one of"),
        ({"reasoning_format": "xml"}, "reasoning_format must be one of"),
        ({"profile": "turbo"}, "unknown profile 'turbo'"),
        ({"reasoning": "yes"}, "reasoning must be true or false"),
        ({"max_tokens": 0}, "max_tokens must be >= 1"),
        ({"max_tokens": True}, "must be an integer"),
        ({"json_schema": "array"}, "json_schema must be a mapping"),
        ({"tempo": 1}, "unknown fields"),
        ({"defaults": {"nothere": "x"}}, "does not use"),
        ({"template": ""}, "non-empty string"),
        ({"priority": 1.5}, "priority must be an integer"),
        ({"priority": "high"}, "priority must be an integer"),
        ({"priority": 2**40}, "32-bit"),
    ],
)
def test_bad_task_fields_fail_at_load(tmp_path: Path, entry: dict, message: str) -> None:
    base = {
        "template": "Look at {thing}.",
        "media": "video",
        "reasoning": True,
        "answer_kind": "text",
        "profile": "reasoning",
    }
    user = _write(tmp_path / "t.yaml", {"tasks": {"mine": {**base, **entry}}})
    with pytest.raises(TaskError, match=message):
        TaskCatalog.load(user)


def test_priorities_rank_closed_loop_questions_first(catalog: TaskCatalog, tmp_path: Path) -> None:
    """vLLM serves lower priorities first: the questions a robot acts on at once come before descriptions."""
    values = {"task": "t", "step": "s", "object": "o", "event": "e", "question": "q", "prompt": "p"}
    rendered = {name: catalog.render(name, **values) for name in catalog.names()}
    urgent = {"next_action", "assisted_next_action", "trajectory", "drive_path", "grounding_2d"}
    assert all(rendered[n].priority == 0 for n in urgent)
    assert all(rendered[n].priority > 0 for n in set(rendered) - urgent)
    assert rendered["caption"].priority > rendered["timestamp_query"].priority
    user = _write(tmp_path / "p.yaml", {"tasks": {"caption": {"priority": -5}}})
    assert TaskCatalog.load(user).render("caption").priority == -5  # a robot's own ranking
    no_priority = {
        "template": "x",
        "media": "video",
        "reasoning": False,
        "answer_kind": "text",
        "profile": "default",
    }
    own = _write(tmp_path / "q.yaml", {"tasks": {"mine": no_priority}})
    assert TaskCatalog.load(own).render("mine").priority == 0


def test_incomplete_new_task_and_bad_profiles(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="missing fields"):
        TaskCatalog.load(_write(tmp_path / "a.yaml", {"tasks": {"new": {"template": "x"}}}))
    with pytest.raises(TaskError, match="top_p"):
        TaskCatalog.load(_write(tmp_path / "b.yaml", {"profiles": {"reasoning": {"top_p": 1.5}}}))
    with pytest.raises(TaskError, match="missing fields"):
        TaskCatalog.load(_write(tmp_path / "c.yaml", {"profiles": {"new": {"top_p": 0.5}}}))
    with pytest.raises(TaskError, match="unknown top-level"):
        TaskCatalog.load(_write(tmp_path / "d.yaml", {"task": {}}))
    with pytest.raises(TaskError, match="not valid YAML"):
        (tmp_path / "e.yaml").write_text("tasks: [unclosed", encoding="utf-8")
        TaskCatalog.load(tmp_path / "e.yaml")
    with pytest.raises(TaskError, match="cannot read"):
        TaskCatalog.load(tmp_path / "missing.yaml")


def test_user_file_overrides_fields_and_adds_tasks(tmp_path: Path) -> None:
    user = _write(
        tmp_path / "mine.yaml",
        {
            "profiles": {
                "reasoning": {"temperature": 0.3},
                "greedy": {
                    "temperature": 0.0,
                    "top_p": 1.0,
                    "top_k": -1,
                    "repetition_penalty": 1.0,
                    "presence_penalty": 0.0,
                    "max_tokens": 64,
                },
            },
            "tasks": {
                "next_action": {"max_tokens": 512},
                "count_cups": {
                    "template": "How many {what} are on the table?",
                    "media": "image",
                    "reasoning": False,
                    "answer_kind": "text",
                    "profile": "greedy",
                },
            },
        },
    )
    catalog = TaskCatalog.load(user)
    assert catalog.sources == (shipped_tasks_path(), user)
    nxt = catalog.spec("next_action")
    assert nxt.sampling.max_tokens == 512 and nxt.sampling.temperature == 0.3
    assert nxt.template == "What can be the next immediate action?"  # untouched fields stay
    assert catalog.render("count_cups", what="cups").prompt == "How many cups are on the table?"
    assert catalog.spec("count_cups").sampling.top_k == -1
    assert "trajectory" in catalog  # the rest of the shipped catalog is still there
    with pytest.raises(TaskError):  # alone, the partial next_action entry is incomplete
        TaskCatalog.load(user, extend=False)


def test_standalone_file(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "config" / "tasks.yaml").read_text())
    data["tasks"] = {"only": data["tasks"]["caption"]}
    catalog = TaskCatalog.load(_write(tmp_path / "only.yaml", data), extend=False)
    assert catalog.names() == ["only"]


def test_installed_share_directory_is_found_through_ament(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    share = tmp_path / "share" / "cosmos_reasoner_ros"
    (share / "config").mkdir(parents=True)
    (share / "config" / "tasks.yaml").write_text((ROOT / "config" / "tasks.yaml").read_text())
    fake = types.ModuleType("ament_index_python.packages")
    fake.get_package_share_directory = lambda name: str(share) if name == "cosmos_reasoner_ros" else ""  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ament_index_python.packages", fake)
    monkeypatch.setattr(package_files, "_SOURCE_ROOT", tmp_path / "site")
    assert shipped_tasks_path() == share / "config" / "tasks.yaml"
    assert "trajectory" in TaskCatalog.load()


def test_no_catalog_anywhere_is_a_task_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ament_index_python.packages", None)  # import fails
    monkeypatch.setattr(package_files, "_SOURCE_ROOT", tmp_path / "site")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    with pytest.raises(TaskError, match="not found"):
        shipped_tasks_path()


def test_import_pulls_in_no_ros() -> None:
    code = (
        "import sys, cosmos_reasoner_ros.reasoner.tasks as t; t.TaskCatalog.load(); "
        "print(sorted(m for m in sys.modules if m.startswith(('rclpy', 'ament_index'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@settings(max_examples=300, deadline=None)
@given(template=st.text(min_size=1, max_size=60), value=st.text(max_size=20))
def test_any_template_loads_or_fails_with_a_task_error(template: str, value: str) -> None:
    entry = {
        "template": template,
        "media": "video",
        "reasoning": False,
        "answer_kind": "text",
        "profile": "default",
    }
    try:
        catalog = TaskCatalog.from_dict({"profiles": {"default": PROFILE}, "tasks": {"t": entry}})
    except TaskError:
        return
    names = catalog.spec("t").placeholders
    if not value.strip() and names:
        with pytest.raises(TaskError):
            catalog.render("t", **dict.fromkeys(names, value))
        return
    prompt = catalog.render("t", **dict.fromkeys(names, value)).prompt
    assert prompt == template.format(**dict.fromkeys(names, value)).strip()


def test_reasoning_turned_off_uses_the_plain_prompt_and_profile(catalog: TaskCatalog, tmp_path: Path) -> None:
    """A fast answer: no reasoning suffix and the cookbook's non-reasoning sampling, with the task's
    max_tokens; a task that does not reason is unchanged; a task may name its own plain profile."""
    reasoning = catalog.render("trajectory", task="pick up the cup")
    fast = catalog.render_without_reasoning("trajectory", task="pick up the cup")
    assert reasoning.reasoning and not fast.reasoning
    assert fast.prompt == reasoning.prompt and fast.priority == reasoning.priority
    assert reasoning.sampling == catalog.profiles["reasoning"]
    assert fast.sampling == catalog.profiles["default"]  # temperature 0.7, top_p 0.8, presence 1.5
    capped = catalog.render_without_reasoning("grounding_2d", object="the cup")
    assert capped == catalog.render("grounding_2d", object="the cup")  # reasons not: nothing changes
    own = _write(
        tmp_path / "p.yaml",
        {
            "profiles": {"quick": {**PROFILE, "temperature": 0.1}},
            "tasks": {"next_action": {"plain_profile": "quick", "max_tokens": 77}},
        },
    )
    mine = TaskCatalog.load(own)
    assert mine.render_without_reasoning("next_action").sampling == SamplingProfile(
        0.1, 0.8, 20, 1.0, 1.5, 77
    )
    assert mine.render("next_action").sampling.max_tokens == 77
    bad = _write(tmp_path / "q.yaml", {"tasks": {"next_action": {"plain_profile": "turbo"}}})
    with pytest.raises(TaskError, match="unknown plain_profile 'turbo'"):
        TaskCatalog.load(bad)
