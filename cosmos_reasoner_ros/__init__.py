"""cosmos_reasoner_ros: camera clips in, Cosmos 3 Reasoner answers out, as ROS 2 messages.

The core modules (frames, clip buffer, clip writer, tasks, requests, client, parsing) import no ROS; the node
and the message conversion wire them to ROS 2.
"""

from pkgutil import extend_path

# On a robot (colcon build, install) the modules and the generated messages (.msg, .action) are one directory
# and this adds nothing. In a development checkout, ./run builds the messages only (CMake option
# COSMOS_REASONER_INSTALL_PYTHON=OFF) and puts the checkout first on PYTHONPATH: this package then spans the
# checkout's modules and the install tree's generated messages, and no installed copy of a module can shadow
# (or go stale behind) the checkout's. test_packaging checks both.
__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"
