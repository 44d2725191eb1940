"""`python -m cosmos_reasoner_ros.node`: the reasoner_node process, as the installed `reasoner_node`."""

from cosmos_reasoner_ros.node.main import main

raise SystemExit(main())
