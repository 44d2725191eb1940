"""The former module of `cosmos-reasoner-server`, kept so that
`python -m cosmos_reasoner_ros.server_supervisor` keeps working for existing launch files and scripts;
the code lives in cosmos_reasoner_ros/server/."""

import sys

from cosmos_reasoner_ros.server.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
