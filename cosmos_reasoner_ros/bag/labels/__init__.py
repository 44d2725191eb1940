"""Labelled recordings, no rclpy: what a labels file holds (schema: Label, LabelSet, LabelTolerances), reading
one safely (loading: load_labels), which request each label is about (matching: bind_labels, match_labels),
and a labels file drafted from a run's answers (draft: draft_labels)."""

from cosmos_reasoner_ros.bag.labels.draft import answer_text, draft_labels, record_kind
from cosmos_reasoner_ros.bag.labels.loading import ANSWER_FORMS, MAX_FILE_BYTES, labels_from_text, load_labels
from cosmos_reasoner_ros.bag.labels.matching import Labelled, Matching, bind_labels, match_labels
from cosmos_reasoner_ros.bag.labels.schema import LABEL_VERSION, Label, LabelSet, LabelTolerances

__all__ = [
    "ANSWER_FORMS",
    "LABEL_VERSION",
    "MAX_FILE_BYTES",
    "Label",
    "LabelSet",
    "LabelTolerances",
    "Labelled",
    "Matching",
    "answer_text",
    "bind_labels",
    "draft_labels",
    "labels_from_text",
    "load_labels",
    "match_labels",
    "record_kind",
]
