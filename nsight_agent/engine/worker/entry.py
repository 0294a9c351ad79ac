"""``python -m nsight_agent.engine.worker.entry SPEC.pkl``: the process ncu profiles.

Kept apart from ``child`` so that running it as ``__main__`` does not import it twice.
"""

import time

# Read first: the caller's stage split counts from here (python and ncu started, nothing imported).
ENTERED = time.time()

import sys  # noqa: E402

from nsight_agent.engine.worker.child import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv, entered=ENTERED))
