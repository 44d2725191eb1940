"""Model families (cosmos_reasoner_ros/model_family.py): detection from config.json, and the thinking switch
and reasoning suffix that every (family, task) request carries, on generated cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.task_values import VALUES

from cosmos_reasoner_ros.clips.media_store import MediaRef
from cosmos_reasoner_ros.errors import TaskError
from cosmos_reasoner_ros.model_family import (
    FAMILIES,
    FAMILY_NAMES,
    family,
    family_from_checkpoint,
    family_from_config,
    family_from_mode,
    resolve_family,
)
from cosmos_reasoner_ros.reasoner.request_builder import (
    REASONING_SUFFIXES,
    RequestSettings,
    build_request,
)
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog

CATALOG = TaskCatalog.load()
# What each real checkpoint's config.json names (Cosmos3-Nano native / plugin, Edge, Qwen3-VL).
KNOWN = {
    "nano": [
        ("Cosmos3ForConditionalGeneration", "cosmos3_omni"),
        ("Cosmos3ReasonerForConditionalGeneration", ""),
    ],
    "edge": [("Cosmos3EdgeForConditionalGeneration", "cosmos3_edge")],
    "qwen3_vl": [("Qwen3VLForConditionalGeneration", "qwen3_vl")],
}
OTHER_KEYS = st.dictionaries(
    st.sampled_from(["torch_dtype", "dtype", "vision_config", "image_token_id", "tie_word_embeddings"]),
    st.one_of(st.integers(), st.text(max_size=8), st.booleans(), st.just({"hidden_size": 64})),
    max_size=4,
)


def _media(kind: str) -> MediaRef:
    path = Path(f"/tmp/media/clip.{'mp4' if kind == 'video' else 'png'}")
    mime = "video/mp4" if kind == "video" else "image/png"
    return MediaRef(kind, path.as_uri(), path, mime, 1000, 0.0, 644, 476, fps=4.0 if kind == "video" else 0.0)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(FAMILY_NAMES),
    task=st.sampled_from(CATALOG.names()),
    fast=st.booleans(),
    structured=st.booleans(),
)
def test_every_request_carries_its_familys_thinking_switch(
    name: str, task: str, fast: bool, structured: bool
) -> None:
    """The oracle is the task's reasoning flag: Edge states it in both directions and adds no suffix; the
    others add the suffix when the task reasons and switch thinking off when it does not."""
    rendered = (CATALOG.render_without_reasoning if fast else CATALOG.render)(task, **VALUES)
    reasoning = rendered.reasoning
    request = build_request(
        rendered, [_media(rendered.media)], RequestSettings(structured_output=structured, model_family=name)
    )
    extra = request.params["extra_body"]
    text = request.messages[-1]["content"][-1]["text"]
    suffix = REASONING_SUFFIXES[rendered.reasoning_format]
    if name == "edge":
        assert extra["chat_template_kwargs"] == {"enable_thinking": reasoning}
        assert suffix not in text
    else:
        assert extra.get("chat_template_kwargs") == (None if reasoning else {"enable_thinking": False})
        assert (suffix in text) == reasoning
    assert text.startswith(rendered.prompt)
    assert ("structured_outputs" in extra) == (structured and rendered.json_schema is not None)


@settings(max_examples=300, deadline=None)
@given(
    expected=st.sampled_from(sorted(KNOWN)),
    pick=st.integers(0, 5),
    where=st.sampled_from(["architectures", "architectures_str", "model_type", "text_model_type", "both"]),
    extra_archs=st.lists(st.sampled_from(["LlamaForCausalLM", "SomethingElse"]), max_size=2),
    other=OTHER_KEYS,
)
def test_family_is_recognised_from_config_variants(
    expected: str, pick: int, where: str, extra_archs: list[str], other: dict[str, Any]
) -> None:
    """Whichever of architectures (a list, or a bare string) or model_type (top-level or the text config's)
    names the model, among unknown architectures and unrelated keys."""
    arch, model_type = KNOWN[expected][pick % len(KNOWN[expected])]
    if not model_type and where in ("model_type", "text_model_type"):
        where = "architectures"
    config: dict[str, Any] = dict(other)
    if where in ("architectures", "both"):
        config["architectures"] = [*extra_archs, arch]
    elif where == "architectures_str":
        config["architectures"] = arch
    else:
        config["architectures"] = extra_archs or None
    if where in ("model_type", "both"):
        config["model_type"] = model_type
    if where == "text_model_type":
        config["text_config"] = {"model_type": model_type}
    assert family_from_config(config).name == expected


@given(
    config=st.dictionaries(
        st.sampled_from(["architectures", "model_type", "text_config"]),
        st.one_of(st.none(), st.text(max_size=12), st.lists(st.text(max_size=12), max_size=3)),
    )
)
def test_an_unknown_config_falls_back_to_qwen3_vl(config: dict[str, Any]) -> None:
    known = {a for f in FAMILIES.values() for a in (*f.architectures, *f.model_types)}
    names = [v for value in config.values() for v in (value if isinstance(value, list) else [value])]
    if known & {v for v in names if isinstance(v, str)}:
        return
    assert family_from_config(config).name == "qwen3_vl"


def test_server_modes_and_stated_families(tmp_path: Path) -> None:
    assert family_from_mode("edge") == FAMILIES["edge"]
    assert family_from_mode("native").name == family_from_mode("plugin").name == "nano"  # type: ignore[union-attr]
    assert family_from_mode("qwen3vl") == FAMILIES["qwen3_vl"]
    assert family_from_mode("external") is None
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["Cosmos3EdgeForConditionalGeneration"]})
    )
    assert family_from_checkpoint(tmp_path) == FAMILIES["edge"]
    assert family_from_checkpoint(tmp_path / "missing") is None
    # auto: a local checkpoint's config.json first, then the mode, then Nano; a stated family wins.
    assert resolve_family("auto", str(tmp_path), "native").name == "edge"
    assert resolve_family("auto", "nvidia/Cosmos3-Edge", "edge").name == "edge"
    assert resolve_family("auto", "nvidia/Cosmos3-Nano", "external").name == "nano"
    assert resolve_family("super", str(tmp_path), "edge").name == "super"
    assert FAMILIES["super"].thinking == FAMILIES["nano"].thinking
    assert FAMILIES["edge"].temporal_patch_size == 1 and FAMILIES["nano"].temporal_patch_size == 2
    with pytest.raises(TaskError, match="model_family must be one of nano, super, edge, qwen3_vl"):
        family("cosmos")
    with pytest.raises(TaskError, match="model_family"):
        RequestSettings(model_family="cosmos")
