"""The node's model_family parameter (issue 40): validated like the other choices, and what the core built
from it sends: generated (parameter value, checkpoint, task) cases against the oracle of
test/test_model_family.py (Edge states the task's reasoning flag in chat_template_kwargs and adds no suffix;
the others add the suffix when the task reasons and switch thinking off when it does not)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.configs import default_config
from support.processes import free_port
from support.task_values import VALUES

from cosmos_reasoner_ros.clips.media_store import MediaRef
from cosmos_reasoner_ros.model_family import FAMILY_NAMES
from cosmos_reasoner_ros.node import core
from cosmos_reasoner_ros.node.parameters import PARAMETERS, ConfigError, validate
from cosmos_reasoner_ros.reasoner.request_builder import REASONING_SUFFIXES, build_request
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog

CATALOG = TaskCatalog.load()
VALUES_OF_PARAMETER = ("auto", *FAMILY_NAMES)
# The `model` parameter: none (the server's first model), a hub id, local checkpoint directories.
MODELS = ("", "nvidia/Cosmos3-Edge", "edge_dir", "nano_dir", "plain_dir")
ARCHITECTURES = {
    "edge_dir": "Cosmos3EdgeForConditionalGeneration",
    "nano_dir": "Cosmos3ForConditionalGeneration",
    "plain_dir": "LlamaForCausalLM",  # no known family: the Qwen3-VL fallback
}


def expected_family(value: str, model: str) -> str:
    """The oracle: a stated family; auto: a local checkpoint's config.json, else Nano (no mode here)."""
    if value != "auto":
        return value
    return {"edge_dir": "edge", "nano_dir": "nano", "plain_dir": "qwen3_vl"}.get(model, "nano")


@pytest.fixture(scope="module")
def cores() -> Iterator[Callable[[str, str], core.Core]]:
    """Cores built from (model_family, model), once each, against a port where nothing listens."""
    built: dict[tuple[str, str], core.Core] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, arch in ARCHITECTURES.items():
            (root / name).mkdir()
            (root / name / "config.json").write_text(json.dumps({"architectures": [arch]}))
        url = f"http://127.0.0.1:{free_port()}/v1"

        def get(value: str, model: str) -> core.Core:
            key = (value, model)
            if key not in built:
                path = str(root / model) if model in ARCHITECTURES else model
                cfg = default_config(
                    model_family=value, model=path, server_url=url, media_dir=str(root / "media")
                )
                built[key] = core.Core.build(cfg)
            return built[key]

        yield get
        for c in built.values():
            c.close()


def _media(kind: str) -> MediaRef:
    path = Path(f"/tmp/media/clip.{'mp4' if kind == 'video' else 'png'}")
    mime = "video/mp4" if kind == "video" else "image/png"
    return MediaRef(kind, path.as_uri(), path, mime, 1000, 0.0, 644, 476, fps=4.0 if kind == "video" else 0.0)


@settings(max_examples=150, deadline=None)
@given(
    value=st.sampled_from(VALUES_OF_PARAMETER),
    model=st.sampled_from(MODELS),
    task=st.sampled_from(CATALOG.names()),
    fast=st.booleans(),
)
def test_the_parameter_decides_the_thinking_switch_and_suffix(
    cores: Callable[[str, str], core.Core], value: str, model: str, task: str, fast: bool
) -> None:
    built = cores(value, model)
    name = expected_family(value, model)
    assert built.pipeline.request_settings.model_family == name
    rendered = (CATALOG.render_without_reasoning if fast else CATALOG.render)(task, **VALUES)
    request = build_request(rendered, [_media(rendered.media)], built.pipeline.request_settings)
    extra = request.params["extra_body"]
    text = request.messages[-1]["content"][-1]["text"]
    suffix = REASONING_SUFFIXES[rendered.reasoning_format]
    if name == "edge":
        assert extra["chat_template_kwargs"] == {"enable_thinking": rendered.reasoning}
        assert suffix not in text
    else:
        assert extra.get("chat_template_kwargs") == (
            None if rendered.reasoning else {"enable_thinking": False}
        )
        assert (suffix in text) == rendered.reasoning
    assert text.startswith(rendered.prompt)


def test_the_default_is_auto_and_keeps_nano() -> None:
    assert PARAMETERS["model_family"][0] == "auto"
    assert validate(default_config()) == []


@pytest.mark.parametrize("bad", ["cosmos", "Edge", "", "nano,edge", "qwen3vl"])
def test_a_bad_value_is_refused_at_start_naming_the_parameter(bad: str, tmp_path: Path) -> None:
    cfg = default_config(model_family=bad, media_dir=str(tmp_path))
    problems = validate(cfg)
    assert problems == [f"model_family: must be one of auto, nano, super, edge, qwen3_vl, got {bad!r}"]
    with pytest.raises(ConfigError, match=r"model_family: must be one of auto, nano, super, edge, qwen3_vl"):
        core.Core.build(cfg)


@pytest.mark.parametrize(
    ("stated", "served", "expected"),
    [
        ("auto", "edge_dir", "edge"),  # the served model's root is a local Edge checkpoint
        ("auto", "plain_dir", "qwen3_vl"),
        ("auto", "nvidia/Cosmos3-Edge", "nano"),  # a hub id: nothing to read, today's default
        ("nano", "edge_dir", "nano"),  # a stated family wins
    ],
)
def test_auto_reads_the_served_models_checkpoint(
    tmp_path: Path, stated: str, served: str, expected: str
) -> None:
    """/v1/models reports the model's root (vLLM: the path it loaded); where this host can read that
    directory's config.json, model_family auto follows it once the server answers."""
    from support.scripted_server import ScriptedServer

    model = served
    if served in ARCHITECTURES:
        (tmp_path / served).mkdir()
        (tmp_path / served / "config.json").write_text(json.dumps({"architectures": [ARCHITECTURES[served]]}))
        model = str(tmp_path / served)
    with ScriptedServer(model=model) as server:
        server.version = "0.26.0"
        cfg = default_config(model_family=stated, server_url=server.base_url, media_dir=str(tmp_path / "m"))
        built = core.Core.build(cfg)
        try:
            assert built.pipeline.request_settings.model_family == expected
            detected = stated == "auto" and served in ARCHITECTURES
            assert (
                f"model_family auto: {expected} (from {model}/config.json)" in built.notes[-1]
            ) == detected
        finally:
            built.close()
