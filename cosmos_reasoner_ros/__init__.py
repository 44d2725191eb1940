"""cosmos_reasoner_ros: camera clips in, Cosmos 3 Reasoner answers out, as ROS 2 messages.

The core modules (frames, clip buffer, clip writer, tasks, requests, client, parsing) import no ROS; the node
and the message conversion wire them to ROS 2.
"""

from pkgutil import extend_path

# In a development tree the generated messages (cosmos_reasoner_ros.msg / .action) live in the colcon install
# tree while the sources live here: let the package span both. On a robot both are in one directory.
__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"
