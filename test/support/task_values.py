"""What the tests that ask every shipped task of a real (tiny, random) model share: a value for every
placeholder of the shipped catalog, the answer cut-offs, and what the parser rightly refuses in a random
model's answers."""

from __future__ import annotations

from cosmos_reasoner_ros.clips.media_store import MediaRef
from cosmos_reasoner_ros.reasoner.answer_stream import Completion
from cosmos_reasoner_ros.reasoner.parsing import ParsedAnswer, parse_answer
from cosmos_reasoner_ros.reasoner.tasks import RenderedTask

# A value for every placeholder of the shipped catalog.
VALUES = {
    "task": "put the charger in the box",
    "step": "pick up the charger",
    "object": "the charger",
    "event": "the arm lifts the charger",
    "question": "Is the gripper holding anything?",
    "prompt": "Which objects are on the table?",
}
# Cut-offs large enough for the random model's answers (structured ones are bounded by their schemas).
TEXT_TOKENS, STRUCTURED_TOKENS = 1024, 2048
# What the parser refuses in a well-formed answer of a random model: a segment that ends before it starts, a
# box without area, a region whose caption is only (Unicode) white space. The JSON was found and read; its
# values mean nothing.
SEMANTIC_REFUSALS = ("before it starts", "has no area", "has no caption")
# The shipped catalog's tasks with a json_schema (structured output).
STRUCTURED_TASKS = frozenset(
    {
        "trajectory",
        "drive_path",
        "grounding_2d",
        "region_captions",
        "temporal_localization",
        "temporal_localization_mmss",
        "timestamp_query",
        "plausibility",
    }
)


def trajectory_schema(max_points: int) -> dict[str, object]:
    """A json_schema for one to max_points labelled trajectory points, in 0-1000 coordinates."""
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": max_points,
        "items": {
            "type": "object",
            "properties": {
                "point_2d": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 0, "maximum": 1000},
                    "minItems": 2,
                    "maxItems": 2,
                },
                "label": {"type": "string", "enum": ["gripper trajectory"]},
            },
            "required": ["point_2d", "label"],
            "additionalProperties": False,
        },
    }


def parse_as_the_node(
    completion: Completion, task: RenderedTask, ref: MediaRef, structured: bool
) -> ParsedAnswer:
    """A task's completion parsed as the node parses it: in the pixels of the media asked about, against the
    task's schema where the request asked for structured output. Raises ParseError."""
    return parse_answer(
        completion.text,
        task.answer_kind,
        ref.width,
        ref.height,
        completion.finish_reason,
        completion.reasoning,
        schema=task.json_schema if structured else None,
    )
