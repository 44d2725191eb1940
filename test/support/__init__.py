"""Test and development machinery that a robot never installs: the scripted OpenAI-compatible server, the real
vLLM tier on the CPU, ROS helper processes, the in-process node harness, sample messages.

Importable as `support` by tests (pytest puts test/ on sys.path), benchmarks and tools/ (`./run` puts test/ on
PYTHONPATH). Scripts in it run as `python -m support.<module>`.
"""
