"""Talking to the Reasoner, without ROS: the task catalog and its prompts (tasks), Qwen3-VL style chat
requests (request_builder), a clip as a video or its frames (media_form), the OpenAI-SDK client with health,
retries, streaming and cancellation (client), the answer parser (parsing, with json_scan for JSON in free
text), and the answer kinds (kinds: KINDS, one unit per kind with its parser, label form, grading and
comparison). parse_cli is `cosmos-reasoner-parse`. Above clips and geometry; below requests."""

from cosmos_reasoner_ros.reasoner.answer_stream import Completion
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.kinds import (
    KINDS,
    POINTS,
    TEXT,
    AnswerKind,
    CameraBox,
    CameraTrajectory,
    CompareCheck,
    GradeContext,
    MetricSpec,
    box_iou,
    discrete_frechet,
    dtw_mean,
    greedy_scores,
    kind_of,
    point_distances,
    segment_iou,
    slot_kinds,
    text_similarity,
)
from cosmos_reasoner_ros.reasoner.media_form import MEDIA_FORMS, MediaForm, MediaRefusal, media_refusal
from cosmos_reasoner_ros.reasoner.parsing import (
    ANSWER_KINDS,
    ParsedAnswer,
    Segment,
    parse_answer,
    parse_choice,
    parse_time,
    split_reasoning,
)
from cosmos_reasoner_ros.reasoner.request_builder import ChatRequest, RequestSettings, build_request
from cosmos_reasoner_ros.reasoner.tasks import RenderedTask, SamplingProfile, TaskCatalog, TaskSpec

__all__ = [
    "ANSWER_KINDS",
    "KINDS",
    "MEDIA_FORMS",
    "POINTS",
    "TEXT",
    "AnswerKind",
    "CameraBox",
    "CameraTrajectory",
    "ChatRequest",
    "ClientSettings",
    "CompareCheck",
    "Completion",
    "GradeContext",
    "MediaForm",
    "MediaRefusal",
    "MetricSpec",
    "ParsedAnswer",
    "ReasonerClient",
    "RenderedTask",
    "RequestSettings",
    "SamplingProfile",
    "Segment",
    "TaskCatalog",
    "TaskSpec",
    "box_iou",
    "build_request",
    "discrete_frechet",
    "dtw_mean",
    "greedy_scores",
    "kind_of",
    "media_refusal",
    "parse_answer",
    "parse_choice",
    "parse_time",
    "point_distances",
    "segment_iou",
    "slot_kinds",
    "split_reasoning",
    "text_similarity",
]
