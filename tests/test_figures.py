"""The breakdown PNG: the rows it draws (newest traced folder, baseline and optimized arm, no sweeps) and its digest."""
import pandas as pd

from workbench.report import figures


def _bd(folder, comparison, role, arm, **ms):
    return [dict(folder=folder, comparison=comparison, role=role, arm=arm, model="m", component=c, ms=v)
            for c, v in ms.items()]


def test_breakdown_rows_pick_the_newest_traced_folder_and_drop_sweeps(tmp_path):
    rows = (_bd("a_old", "packing", "baseline", "rebuild", gemm=1.0)
            + _bd("b_new", "packing", "baseline", "rebuild", gemm=10.0, sync_stall=3.0)
            + _bd("b_new", "packing", "optimized", "cached", gemm=10.0)
            + _bd("b_new", "packing", "other", "precomputed", gemm=9.0)
            + _bd("b_new", "packing@layers=2", "baseline", "rebuild", gemm=2.0))
    t = figures.breakdown_rows(pd.DataFrame(rows))
    assert t["label"].tolist() == ["packing: rebuild\nm", "packing: cached\nm"]
    assert t.loc[0, "gemm"] == 10.0 and t.loc[0, "sync_stall"] == 3.0 and t.loc[1, "sync_stall"] == 0.0
    d = figures.breakdown_digest(t)
    p = figures.save_breakdown(t, str(tmp_path / "b.png"))
    assert p == d and figures.png_digest(str(tmp_path / "b.png")) == d
    t2 = t.copy()
    t2.loc[0, "gemm"] = 11.0
    assert figures.breakdown_digest(t2) != d  # a changed number makes the figure stale
