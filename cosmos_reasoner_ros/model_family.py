"""Model families: what differs between the Reasoner checkpoints the package serves, in one place.

- nano (Cosmos3-Nano, and super: Cosmos3-Super, handled the same): reasoning is asked for by a prompt suffix;
  a request that does not reason turns the chat template's thinking off.
- edge (Cosmos3-Edge, about 4B: a Nemotron-H text model with a SigLIP2 vision tower): its chat template thinks
  by default and has `enable_thinking`; every request states the switch, on for a task that reasons, off for
  one that does not, and no suffix is added.
- qwen3_vl (the fallback, and the tiny CPU test model): as nano.
A family is recognised from a checkpoint's config.json (architectures, then model_type), from the server's
`mode`, or stated. Free of ROS and of server/ imports: the node, the request builder and the server use it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.errors import TaskError
from cosmos_reasoner_ros.parameters.node_server import AUTO_FAMILY as AUTO
from cosmos_reasoner_ros.parameters.node_server import FAMILY_NAMES

__all__ = [
    "AUTO",
    "DEFAULT_FAMILY",
    "FAMILIES",
    "FAMILY_NAMES",
    "ModelFamily",
    "family",
    "family_from_checkpoint",
    "family_from_config",
    "family_from_mode",
    "resolve_family",
]


@dataclass(frozen=True)
class ModelFamily:
    name: str
    # How reasoning is asked for: "suffix" (the reasoning format's prompt suffix; thinking switched off only
    # for a request that does not reason) or "template" (the chat template's enable_thinking, both ways).
    thinking: str
    architectures: tuple[str, ...]  # config.json `architectures` that name this family
    model_types: tuple[str, ...]  # config.json `model_type` values that name it
    server_modes: tuple[str, ...]  # cosmos-reasoner-server modes that serve it
    # The vision processor's frame facts (defaults; a checkpoint's video_preprocessor_config.json is read
    # where it is at hand, clips/model_frames.py): patch side [px], 2x2 merge, frames per temporal patch.
    patch_size: int = 16
    merge_size: int = 2
    temporal_patch_size: int = 2

    def reasoning_suffix(self, reasoning: bool) -> bool:
        """Whether a request's text ends with the reasoning format's suffix."""
        return reasoning and self.thinking == "suffix"

    def thinking_switch(self, reasoning: bool) -> dict[str, bool] | None:
        """The chat template's `chat_template_kwargs` of a request (None: none sent)."""
        if self.thinking == "template":
            return {"enable_thinking": reasoning}
        return None if reasoning else {"enable_thinking": False}


# One entry for each of FAMILY_NAMES, in its order (the model_family parameter's choices, on the records'
# floor: parameters/node_server.py); test/parameters/test_parameter_records.py checks that they agree.
FAMILIES: dict[str, ModelFamily] = {
    f.name: f
    for f in (
        ModelFamily(
            "nano",
            "suffix",
            ("Cosmos3ForConditionalGeneration", "Cosmos3ReasonerForConditionalGeneration"),
            ("cosmos3_omni", "cosmos3", "cosmos3_reasoner"),
            ("native", "plugin"),
        ),
        # Cosmos3-Super: the same architecture and handling as Nano; only named when stated.
        ModelFamily("super", "suffix", (), (), ()),
        ModelFamily(
            "edge",
            "template",
            ("Cosmos3EdgeForConditionalGeneration",),
            ("cosmos3_edge",),
            ("edge",),
            temporal_patch_size=1,  # SigLIP2 encodes each frame on its own
        ),
        ModelFamily(
            "qwen3_vl",
            "suffix",
            ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration"),
            ("qwen3_vl", "qwen3_vl_moe"),
            ("qwen3vl",),
        ),
    )
}
DEFAULT_FAMILY = "nano"
FALLBACK_FAMILY = "qwen3_vl"  # a checkpoint that names no known architecture or model type


def family(name: str) -> ModelFamily:
    """The family called `name` (one of FAMILY_NAMES)."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise TaskError(f"model_family must be one of {', '.join(FAMILY_NAMES)}, got {name!r}") from None


def family_from_config(config: Mapping[str, Any]) -> ModelFamily:
    """The family of a checkpoint's config.json: its first known architecture, else its model_type (or its
    text_config's), else the Qwen3-VL fallback."""
    architectures = config.get("architectures") or ()
    if isinstance(architectures, str):
        architectures = (architectures,)
    for arch in architectures:
        for fam in FAMILIES.values():
            if arch in fam.architectures:
                return fam
    text = config.get("text_config")
    types = [config.get("model_type"), text.get("model_type") if isinstance(text, Mapping) else None]
    for model_type in types:
        for fam in FAMILIES.values():
            if model_type in fam.model_types:
                return fam
    return FAMILIES[FALLBACK_FAMILY]


def family_from_checkpoint(path: Path) -> ModelFamily | None:
    """The family of a local checkpoint directory; None when it has no readable config.json (a hub id)."""
    try:
        config = json.loads((Path(path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return family_from_config(config) if isinstance(config, Mapping) else None


def family_from_mode(mode: str) -> ModelFamily | None:
    """The family a cosmos-reasoner-server mode serves; None for external (it serves whatever runs there)."""
    for fam in FAMILIES.values():
        if mode in fam.server_modes:
            return fam
    return None


def resolve_family(stated: str = AUTO, model: str = "", mode: str = "") -> ModelFamily:
    """The family in use: the stated one; for auto, a local checkpoint's config.json, else the server's mode,
    else the default (Nano)."""
    if stated and stated != AUTO:
        return family(stated)
    found = family_from_checkpoint(Path(model)) if model and not _hub_id(model) else None
    return found or family_from_mode(mode) or FAMILIES[DEFAULT_FAMILY]


def _hub_id(model: str) -> bool:
    """A hub id (org/name), as config/server.yaml tells them from local directories."""
    return not model.startswith(("/", ".", "~"))
