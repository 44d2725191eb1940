"""reasoner_node's own parameters, one record each, in the order the node declares them (a camera's in
cameras.py, the handoff's in handoff.py), gathered from one module per concern: node_clips.py (cameras,
buffers, clip files, media), node_server.py (the server and its requests) and node_requests.py (tasks,
triggers, admission, the node's periods, publication checks). config/reasoner.yaml shows each with its
default and unit; a test checks the file against these records.

Choices and defaults that another module also names (MEDIA_FORMS, the model families, the result checks,
the media folder) are written here as values, for this floor imports nothing of the package but the URL rule;
test/parameters/test_parameter_records.py checks that they agree.
"""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.node_clips import CLIP_RECORDS, DEFAULT_MEDIA_DIR
from cosmos_reasoner_ros.parameters.node_requests import MIN_TRIGGER_PERIOD_S, REQUEST_RECORDS
from cosmos_reasoner_ros.parameters.node_server import SERVER_RECORDS
from cosmos_reasoner_ros.parameters.record import Parameter, by_name

__all__ = ["DEFAULT_MEDIA_DIR", "MIN_TRIGGER_PERIOD_S", "NODE_PARAMETERS", "NODE_RECORDS"]

NODE_RECORDS: tuple[Parameter, ...] = (*CLIP_RECORDS, *SERVER_RECORDS, *REQUEST_RECORDS)
NODE_PARAMETERS = by_name(NODE_RECORDS)
