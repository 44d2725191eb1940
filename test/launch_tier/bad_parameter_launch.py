"""launch_testing: `reasoner.launch.py` with a parameter file holding one invalid value.

The node must refuse to start: it logs a message naming the parameter and exits with a non-zero code, which
launch reports as the process's death (test/launch_tier/test_launch_tier.py checks launch's own report line).

  ./run exec python -m launch_testing.launch_test test/launch_tier/bad_parameter_launch.py
"""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path
from typing import Any

import launch_testing
import launch_testing.actions
import launch_testing.util
import yaml
from launch import LaunchDescription
from support import launch_tools

BAD_PARAMETER = "clip_seconds"
BAD_VALUE = -1.0  # a clip cannot be shorter than nothing
_WORK = tempfile.TemporaryDirectory(prefix="crr-launch-bad-")


def generate_test_description() -> tuple[LaunchDescription, dict[str, Any]]:
    params = Path(_WORK.name) / "bad_reasoner.yaml"
    params.write_text(yaml.safe_dump({"reasoner_node": {"ros__parameters": {BAD_PARAMETER: BAD_VALUE}}}))
    reasoner = launch_tools.include_reasoner(
        "http://127.0.0.1:9/v1",  # never reached: the node stops before any request
        Path(_WORK.name) / "media",
        params_file=str(params),
    )
    # The node is the only process and stops at once: keep the launch alive until the tests have looked.
    keep_alive = launch_testing.util.KeepAliveProc()
    return LaunchDescription([reasoner, keep_alive, launch_testing.actions.ReadyToTest()]), {}


class TestBadParameter(unittest.TestCase):
    def test_the_node_names_the_parameter_and_stops(self, proc_output: Any, proc_info: Any) -> None:
        proc_output.assertWaitFor(BAD_PARAMETER, process="reasoner_node", timeout=60)
        proc_info.assertWaitForShutdown(process="reasoner_node", timeout=60)


@launch_testing.post_shutdown_test()
class TestAfterShutdown(unittest.TestCase):
    def test_the_node_exited_non_zero(self, proc_info: Any) -> None:
        code = proc_info["reasoner_node"].returncode
        self.assertNotIn(code, (0, None), f"reasoner_node exited with {code}")
        self.assertGreater(code, 0, f"reasoner_node was killed by signal {-code}, it did not exit by itself")

    def test_the_message_says_what_is_wrong(self, proc_output: Any) -> None:
        text = "".join(
            o.text.decode(errors="replace") for o in proc_output if "reasoner_node" in o.process_name
        )
        self.assertIn(BAD_PARAMETER, text)
        self.assertTrue(
            "FATAL" in text or "ERROR" in text, text
        )  # logged as an error, not printed in passing
        self.assertNotIn("Traceback", text)  # a message for the user, not a crash
