"""`RankWriter`: a `RunWriter` per rank; rank 0 writes the one results folder that holds every rank's rows."""
from __future__ import annotations

import os
import shutil
import tempfile

from workbench.measure.results import ENV_COLUMNS, RESULT_COLUMNS, RunWriter


class RankWriter(RunWriter):
    """Rank 0: the run folder, with a `rank` column in results.csv. Other ranks: rows kept in memory (gathered to
    rank 0 after every comparison), errors.log in a scratch folder (gathered too), nothing written to the run
    folder but their own trace files (`traces/<cmp>/<arm>.rank<R>...`)."""

    COLUMNS = RESULT_COLUMNS + ["rank"] + ENV_COLUMNS

    def __init__(self, out_dir, run_id, *, rank: int, **kw):
        self.rank = rank
        self.real_dir = out_dir
        self.scratch = None if rank == 0 else tempfile.mkdtemp(prefix=f"wb-rank{rank}-")
        super().__init__(out_dir if rank == 0 else self.scratch, run_id, **kw)

    @property
    def is_main(self):
        return self.rank == 0

    def path(self, *parts):
        if parts and parts[0] == "traces":
            parts = list(parts)
            parts[-1] = f"{parts[-1]}.rank{self.rank}"
            p = os.path.join(self.real_dir, *parts)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            return p
        return super().path(*parts)

    def add(self, *args, **kw):
        super().add(*args, **kw)
        self.rows[-1]["rank"] = self.rank

    def add_sample(self, comparison, sample, prefix="", **env):
        own = sample.get("rank_step_ms")
        if own is None:
            return super().add_sample(comparison, sample, prefix, **env)
        dp = sample["step_ms"]
        super().add_sample(comparison, {**sample, "step_ms": own}, prefix, **env)
        self.add(comparison, sample["arm"], prefix + "dp_step_ms", dp, "ms", rep=sample.get("rep"),
                 step=sample.get("step"), batch=sample.get("batch"), **env)

    def frame(self):
        import pandas as pd
        return pd.DataFrame(self.rows, columns=self.COLUMNS)

    def flush(self):
        if not self.is_main:
            return
        import csv
        import math
        path = os.path.join(self.out_dir, "results.csv")
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.COLUMNS, extrasaction="ignore")
            w.writeheader()
            for r in self.rows:
                w.writerow({k: ("" if v is None or (isinstance(v, float) and not math.isfinite(v)) else v)
                            for k, v in r.items()})
        os.replace(tmp, path)

    def write_summary(self, summary):
        if self.is_main:
            super().write_summary(summary)

    def write_meta(self):
        if self.is_main:
            super().write_meta()

    def take_rows(self) -> list:
        rows, self.rows = self.rows, []
        return rows

    def take_errors(self) -> str:
        p = os.path.join(self.out_dir, "errors.log")
        if self.is_main or not os.path.exists(p):
            return ""
        with open(p) as f:
            text = f.read()
        os.remove(p)
        return text

    def close(self):
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
