"""The records of the package's settings, on the bottom floor and free of ROS.

One record per parameter (name, type, default, unit, range or choices, description) for the node, its
cameras and the handoff, and the one rule for a server URL (normalise, check, redact). The node's
declarations, its validation, the launch arguments, config/reasoner.yaml and the bag tools' type schema
come from here; see docs/ARCHITECTURE.md.
"""
