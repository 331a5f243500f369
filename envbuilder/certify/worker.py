"""Entry of every torch.distributed.run worker: `python -m envbuilder.certify.worker MODULE ARGS...`.

torch starts each worker in a session of its own, so a process-group kill of the launcher misses them,
and a SIGKILLed launcher would leave them running (holding GPUs) under init. This entry first arranges
for the worker to die with the launcher (PR_SET_PDEATHSIG), then runs MODULE as __main__.
"""

from __future__ import annotations

import runpy
import sys

from envbuilder import procs


def main() -> None:
    procs.die_with_parent()
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m envbuilder.certify.worker MODULE [ARGS...]")
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
