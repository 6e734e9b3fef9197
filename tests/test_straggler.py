"""The exposed wait (dist_waits.exposed_waits) and the straggler-term verdict (workbench.savings.straggler), on synthetic
events and synthetic run folders: exact sums, not timings."""
import json

import pandas as pd
import pytest

from workbench.traces import dist_waits
from workbench.savings import straggler


def _ev(rows):
    return pd.DataFrame([dict(source="t", kind=k, name=n, start_ns=s, end_ns=e, stream=st, layer=None,
                              **{"pass": None}) for k, n, s, e, st in rows])


def _two_ranks(extra_rank1=()):
    # rank 0 computes until 100 then enters an all-gather and a reduce-scatter; rank 1 finishes its compute at 60
    # and waits for rank 0 in both collectives (two streams) from 60 to 100
    r0 = _ev([("kernel", "gemm", 0, 100, 7), ("kernel", "ncclDevKernel_AllGather_RING_LL", 100, 150, 22),
              ("kernel", "ncclDevKernel_ReduceScatter_Sum_bf16", 100, 140, 26)])
    r1 = _ev([("kernel", "gemm", 0, 60, 7), ("kernel", "ncclDevKernel_AllGather_RING_LL", 60, 150, 22),
              ("kernel", "ncclDevKernel_ReduceScatter_Sum_bf16", 60, 140, 26), *extra_rank1])
    return {0: r0, 1: r1}


def test_summed_wait_double_counts_and_exposed_wait_is_the_union():
    ev = _two_ranks()
    w, unmatched = dist_waits.collective_waits(ev)
    assert not unmatched
    x = dist_waits.exposed_waits(ev, w, 1).set_index("rank")
    assert x.loc[1, "wait_ms"] == pytest.approx(80 / 1e6)          # 40 + 40: the two streams wait at once
    assert x.loc[1, "exposed_wait_ms"] == pytest.approx(40 / 1e6)  # the union: 60..100
    assert x.loc[0, "exposed_wait_ms"] == 0
    assert x.loc[1, "exposed_collective_ms"] == pytest.approx(90 / 1e6)


def test_other_gpu_work_during_the_wait_is_not_exposed():
    ev = _two_ranks([("kernel", "elementwise", 70, 90, 18)])
    w, _ = dist_waits.collective_waits(ev)
    x = dist_waits.exposed_waits(ev, w, 1).set_index("rank")
    assert x.loc[1, "exposed_wait_ms"] == pytest.approx(20 / 1e6)


def test_collectives_split_into_steps_by_their_order():
    a, b = _two_ranks(), _two_ranks()
    shift = 1000
    ev = {r: pd.concat([a[r], b[r].assign(start_ns=b[r]["start_ns"] + shift, end_ns=b[r]["end_ns"] + shift)],
                       ignore_index=True) for r in (0, 1)}
    w, _ = dist_waits.collective_waits(ev)
    x = dist_waits.exposed_waits(ev, w, 2)
    assert sorted(x["step"].unique()) == [0, 1]
    assert x[x["rank"] == 1]["exposed_wait_ms"].tolist() == pytest.approx([40 / 1e6, 40 / 1e6])


def test_projection_reproduces_two_ranks_and_grows_with_order_statistics():
    s1, s2 = {"mean": 10.0, "se": 1.0}, {"mean": 16.0, "se": 1.0}
    p = {q["ranks"]: q for q in straggler.projection(s1, s2, (2, 4, 8))}
    assert p[2]["saving_ms"] == pytest.approx(16.0)
    assert p[4]["saving_ms"] == pytest.approx(10 + 6 * 1.0293753730 / 0.5641895835)
    assert p[8]["saving_ms"] > p[4]["saving_ms"]


def _folder(path, name, steps_ms, *, ranks=None, base_ms=None):
    """A run folder: one comparison `c` (arms b, o), 4 reps x 2 steps; steps_ms = {arm: [per-rep ms]}."""
    rows = []
    for arm, per_rep in steps_ms.items():
        for rep, ms in enumerate(per_rep):
            for step in range(2):
                v = ms + (0.5 if step else -0.5)
                if ranks:
                    for r in range(ranks):
                        rows += [dict(comparison="c", arm=arm, rep=rep, batch=step, step=step, metric=m, value=val,
                                      rank=r) for m, val in (("step_ms", v - 3 * r), ("dp_step_ms", v))]
                else:
                    rows.append(dict(comparison="c", arm=arm, rep=rep, batch=step, step=step, metric="step_ms",
                                     value=v))
    path.mkdir()
    pd.DataFrame(rows).to_csv(path / "results.csv", index=False)
    mean = {a: sum(v) / len(v) for a, v in steps_ms.items()}
    comp = {"name": "c", "model": "m", "baseline": {"arm": "b", "step_ms": base_ms or mean["b"]},
            "optimized": {"arm": "o", "step_ms": mean["o"]}, "speedup": mean["b"] / mean["o"]}
    if ranks:
        comp["distributed"] = {"world_size": ranks}
    (path / "summary.json").write_text(json.dumps({"comparisons": [comp]}))
    return str(path)


def _inputs(path, w_base, w_opt):
    rows = [dict(comparison="c", arm=a, rank=r, step=s, collectives=1, wait_ms=w + r, exposed_wait_ms=w + s,
                 exposed_collective_ms=w, traced_step_ms=105.0)
            for a, w in (("b", w_base), ("o", w_opt)) for r in (0, 1) for s in (0, 1, 2)]
    pd.DataFrame(rows).to_csv(path / straggler.INPUTS_FILE, index=False)


def test_prediction_is_one_gpu_saving_plus_wait_removed(tmp_path):
    one = _folder(tmp_path / "one", "c", {"b": [100, 101, 99, 100], "o": [90, 91, 89, 90]})
    two = _folder(tmp_path / "two", "c", {"b": [110, 111, 109, 110], "o": [95, 96, 94, 95]}, ranks=2)
    _inputs(tmp_path / "two", 8.0, 3.0)
    (r,) = straggler.compare(one, two)
    assert r["one_gpu"]["saving_ms"] == pytest.approx(10.0)
    assert r["two_gpu"]["saving_ms"] == pytest.approx(15.0)   # the dp_step_ms rows, not the ranks' own steps
    assert r["wait_removed_ms"]["mean"] == pytest.approx(5.0)
    assert r["predicted_ms"] == pytest.approx(15.0)
    assert r["ratio"] == pytest.approx(1.0)


def test_a_two_gpu_saving_far_from_the_prediction_is_not_confirmed(tmp_path):
    # negative control: the 2-GPU saving is a quarter of what the model predicts
    one = _folder(tmp_path / "one", "c", {"b": [100, 101, 99, 100], "o": [80, 81, 79, 80]})
    two = _folder(tmp_path / "two", "c", {"b": [110, 111, 109, 110], "o": [105, 106, 104, 105]}, ranks=2)
    _inputs(tmp_path / "two", 3.0, 3.0)
    (r,) = straggler.compare(one, two)
    assert r["ratio"] == pytest.approx(0.25)
    assert r["verdict"] != "confirmed"


def test_not_comparable_when_ranks_do_less_than_the_one_gpu_work(tmp_path):
    one = _folder(tmp_path / "one", "c", {"b": [200, 201, 199, 200], "o": [90, 91, 89, 90]})
    two = _folder(tmp_path / "two", "c", {"b": [110, 111, 109, 110], "o": [95, 96, 94, 95]}, ranks=2)
    _inputs(tmp_path / "two", 8.0, 3.0)
    (r,) = straggler.compare(one, two)
    assert r["verdict"] == "not comparable"


def test_cli_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert straggler.main(["--one", str(tmp_path), "--two", str(tmp_path)]) == 2
    assert "not a run folder" in capsys.readouterr().err
