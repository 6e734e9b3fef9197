"""The A/B under torchrun: the model sharded with FSDP2 (`fully_shard`), one process per rank, rank 0 writing one
results folder that holds every rank's rows (`context`: the process group and failures; `writer`: `RankWriter`;
`runner`: `DistRunner` and `main`).

    torchrun --nproc-per-node 2 -m workbench.ab --opt all --trace torch --out runs/fsdp2   # 2 GPUs (nccl)
    torchrun --standalone --nproc-per-node 2 -m workbench.ab --opt packing --device cpu    # CPU (gloo): the tests

`python -m workbench.ab` without torchrun is untouched: this module takes over only when torchrun's environment
(WORLD_SIZE, RANK, LOCAL_RANK) is set (`launched()`).

What a distributed run does (`DistRunner`, a `workbench.ab.Runner`):
- Process group: nccl on CUDA (device cuda:LOCAL_RANK), gloo on the CPU (`--device cpu`, or no GPU); a second,
  gloo, group carries the workbench's own messages (step times, rows, status), so the traced NCCL stream holds only
  FSDP2's collectives. Timeout: $WORKBENCH_DIST_TIMEOUT_S (900 s).
- Model: built whole on every rank from the same seed (identical weights), LoRA applied, then `fully_shard` on
  every decoder layer and on the root, on a 1-D device mesh of all ranks. FSDP2 shards every parameter, frozen or
  not: mixed requires_grad inside one FSDP group is supported (the frozen base gets no gradient and no
  reduce-scatter; the LoRA gradients are reduce-scattered, averaged over ranks). On the CPU this works with gloo and
  `init_device_mesh("cpu", ...)` on torch 2.11 and 2.13 (checked on 2.13).
- Data: each rank its own packed batches: rank r draws them with seed `--seed + r * DATA_SEED_STRIDE` (rank 0's
  batches are the single-process run's). The global batch is the concatenation of the ranks' batches; its loss is
  the mean of the ranks' losses (what data-parallel gradient averaging optimizes).
- Timing: every rank runs the same protocol in lockstep (FSDP2's collectives force it). After each timed step the
  ranks exchange their step times: a synchronous data-parallel step costs the slowest rank's time, so the engine's
  samples (`step_ms`, the speedup and its CI, warmup settling) use the max across ranks per step (`dp_step_ms` rows),
  while each rank's own time is its `step_ms` row. Every decision that could differ between ranks (warmup settled,
  more reps) is therefore taken on identical numbers. `--budget-s` (a wall-clock decision per rank) is refused.
- Per rank: step time, syncs (the counted pass) and peak memory are rows with a `rank` column; summary.json holds
  them per rank per arm (`ranks`), and per comparison `distributed` (world size, backend, the FSDP2 vs
  single-process equivalence, the collective wait estimate of `workbench.traces.dist_waits` when traced on GPUs).
- Traces (`--trace torch`): every rank writes its own files, `traces/<cmp>/<arm>.rank<R>.pt.trace.json.gz`
  (different files, never one file from two ranks); everything else in the folder is written by rank 0 alone.
  NVTX ranges are the same `wb/...` ranges on every rank (one process per rank: nsys shows them per process).
- Equivalence: besides the arms against their baseline (losses averaged over ranks, gradients gathered whole),
  in fp32 the sharded run's loss and LoRA gradients on the global batch are checked against a single-process run of
  the unsharded model over the same global batch (rank 0 computes it), within `equivalence.RTOL`.
- Failure: an error on any rank stops the run on every rank. The failing rank posts its error to the rendezvous
  store and leaves the process group (its peers' pending collectives fail at once, on gloo); rank 0 prints one line
  `failed: rank N: ...` and marks meta.json failed; the failing rank waits (60 s at most) for rank 0 to finish
  writing before it exits.

Test-only switches: $WORKBENCH_TEST_FAIL_RANK=N[:K] makes rank N raise at its K-th step (default 1st; the fp32
FSDP2 vs single-process check is a step); $WORKBENCH_TEST_DROP_BATCH_RANK=N
makes rank N drop its batch (loss x 0) in the FSDP2 vs single-process check (the negative control).
"""
from __future__ import annotations

from workbench.ab.distributed.context import (DATA_SEED_STRIDE, DROP_ENV, FAIL_ENV, SPEEDUP_BASIS, TIMEOUT_ENV,
                                              WATCH_GRACE_S, WATCH_PERIOD_S, DistContext, RankFailed, full, init,
                                              launched, shard)
from workbench.ab.distributed.rank_runner import DistRunner, check_args, main
from workbench.ab.distributed.writer import RankWriter

__all__ = ["DATA_SEED_STRIDE", "DROP_ENV", "FAIL_ENV", "SPEEDUP_BASIS", "TIMEOUT_ENV", "WATCH_GRACE_S", "WATCH_PERIOD_S",
           "DistContext", "RankFailed", "full", "init", "launched", "shard", "DistRunner", "check_args", "main",
           "RankWriter"]
