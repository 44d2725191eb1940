"""reasoner_node's own parameters, one record each, in the order the node declares them (a camera's in
cameras.py, the handoff's in handoff.py), gathered from one module per concern: node_clips.py (cameras,
buffers, clip files, media), node_server.py (the server and its requests) and node_requests.py (tasks,
triggers, admission, the node's periods, publication checks). config/reasoner.yaml shows each with its
default and unit; a test checks the file against these records.

Choices that another module also uses live on this floor and that module takes them from here:
MEDIA_FORMS (reasoner/media_form.py), BUSY_POLICIES (requests/scheduler.py), FAMILY_NAMES (model_family.py),
CHECK_NAMES (check_names.py; requests/result_checks.py). The media folder is still written twice
(package_files.py is this floor's sibling, and neither may import the other);
test/parameters/test_parameter_records.py checks that the two agree.
"""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.node_clips import CLIP_RECORDS, DEFAULT_MEDIA_DIR
from cosmos_reasoner_ros.parameters.node_requests import MIN_TRIGGER_PERIOD_S, REQUEST_RECORDS
from cosmos_reasoner_ros.parameters.node_server import SERVER_RECORDS
from cosmos_reasoner_ros.parameters.record import Parameter, by_name

__all__ = ["DEFAULT_MEDIA_DIR", "MIN_TRIGGER_PERIOD_S", "NODE_PARAMETERS", "NODE_RECORDS"]

NODE_RECORDS: tuple[Parameter, ...] = (*CLIP_RECORDS, *SERVER_RECORDS, *REQUEST_RECORDS)
NODE_PARAMETERS = by_name(NODE_RECORDS)
