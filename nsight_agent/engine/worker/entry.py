"""``python -m nsight_agent.engine.worker.entry SPEC.pkl``: the process ncu profiles.

Kept apart from ``child`` so that running it as ``__main__`` does not import it twice.
"""

import time

# Read first: the caller's stage split counts from here (python and ncu started, nothing imported).
ENTERED = time.time()

import os  # noqa: E402
import sys  # noqa: E402

from nsight_agent.engine.worker import cuda_early  # noqa: E402

# "normal": the child leaves through the interpreter's teardown (sys.exit), not os._exit.
EXIT_ENV = "NSIGHT_AGENT_CHILD_EXIT"

if __name__ == "__main__":
    cuda_early.start()  # the driver comes up while the child's imports and the function's load
    from nsight_agent.engine.worker.child import main

    code = main(sys.argv, entered=ENTERED)
    if os.environ.get(EXIT_ENV) != "normal":
        # Everything the caller reads (manifest, progress, error, collected info) is written and
        # closed by now, and ncu has every result as each kernel ends; what is left is tearing
        # down torch and the CUDA context under ncu, which ncu waits for before it writes the
        # report. Skip it: flush what Python buffers and leave.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
