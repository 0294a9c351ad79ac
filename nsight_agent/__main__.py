"""``python -m nsight_agent``: the ``nsight-agent`` command."""

import sys

from nsight_agent.cli import main

sys.exit(main())
