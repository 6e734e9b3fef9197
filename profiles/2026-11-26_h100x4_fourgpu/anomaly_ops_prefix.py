"""`python -m workbench.ab.distributed.backward_ops` with the offload checkpoint as it was before the fix (commit
941776c and earlier): transformers 5.17's `partial(layer.__call__)` checkpointed as it came, FSDP2's hooks inside the
Function. Only for the CPU evidence of issue 41's anomaly (`anomaly_ops.sh`); never for a result."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from workbench.ab.distributed import backward_ops  # noqa: E402
from workbench.ab.distributed.probe import run_rank_main  # noqa: E402
from workbench.opts import offload  # noqa: E402

offload._runs_module_hooks = lambda fn: False  # the pre-fix path: hooks stay inside the Function

if __name__ == "__main__":
    raise SystemExit(run_rank_main(backward_ops.main))
