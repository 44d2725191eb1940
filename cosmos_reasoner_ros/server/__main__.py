"""`python -m cosmos_reasoner_ros.server`: the same as `cosmos-reasoner-server`."""

import sys

from cosmos_reasoner_ros.server.cli import main

sys.exit(main())
