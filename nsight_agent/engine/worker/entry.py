"""``python -m nsight_agent.engine.worker.entry SPEC.pkl``: the process ncu profiles.

Kept apart from ``child`` so that running it as ``__main__`` does not import it twice.
"""

import sys

from nsight_agent.engine.worker.child import main

if __name__ == "__main__":
    sys.exit(main(sys.argv))
