#!/usr/bin/env bash
# studies/moe_two_term/moe_same_host.sh's analysis (CPU): each part's per-GPU campaigns folded into one folder per part, beside the
# per-GPU ones (which stay as they ran), then the commands its header fixed, into DIR/dose_analysis.txt, verdicts.txt, seeds.txt:
#   DIR/dose        python -m workbench.ab.dose_merge   (a copy of the first dose campaign, the others merged in)
#   DIR/moe_l8_4k   python -m workbench.ab.processes_merge   (likewise; also moe_q30_l4)
# (the seeds part's runs are one process each, run in place: read by folder_savings where they lie)
# A part with no campaign that ran is skipped and named. Usage: bash studies/moe_two_term/moe_same_host_merge.sh DIR [DIR2 ...]
# (DIR2 ...: more leases' moe_host folders, fresh seeds by SEED_OFFSET; their campaigns join DIR's)
set -u
DIR=${1:?usage: bash studies/moe_two_term/moe_same_host_merge.sh DIR [DIR2 ...] (moe_host folders)}
ALL=("$@")
PY=${PY:-python}
merge() {  # part tool glob...
  local part=$1 tool=$2; shift 2
  local src=() f
  for f in "$@"; do [ -e "$f/processes.json" ] || [ -e "$f/dose_run.json" ] && src+=("$f"); done
  if [ ${#src[@]} -eq 0 ]; then echo "$part: no campaign ran"; return; fi
  rm -rf "$DIR/$part" && cp -r "${src[0]}" "$DIR/$part"
  if [ ${#src[@]} -gt 1 ]; then $PY -m $tool "$DIR/$part" "${src[@]:1}" | tail -n 2
  elif [ "$tool" = workbench.ab.processes_merge ]; then $PY -m workbench.ab.processes "$DIR/$part" | tail -n 1  # estimates of one (maybe cut) campaign
  else echo "$part: one campaign, copied"; fi
}
each() { local d; for d in "${ALL[@]}"; do echo "$d"/g*/$1; done; }  # the part's folders in every lease
merge dose workbench.ab.dose_merge $(each 'dose_*')
merge moe_l8_4k workbench.ab.processes_merge $(each 'moe_l8_4k_*')
merge moe_q30_l4 workbench.ab.processes_merge $(each 'moe_q30_l4_*')
# then the analysis the run's header fixed (into DIR/*.txt): the dose, both verdicts against it, and the seeds question
[ -e "$DIR/dose/dose_run.json" ] && $PY -m workbench.savings.dose_fit "$DIR/dose" > "$DIR/dose_analysis.txt" 2>&1 && head -n 3 "$DIR/dose_analysis.txt"
V=(); for p in moe_l8_4k moe_q30_l4; do [ -e "$DIR/$p/processes.json" ] && V+=("$DIR/$p"); done
if [ ${#V[@]} -gt 0 ] && [ -e "$DIR/dose/dose_analysis.json" ]; then
  $PY -m workbench verdicts "${V[@]}" --dose "$DIR/dose" > "$DIR/verdicts.txt" 2>&1; head -n 3 "$DIR/verdicts.txt"
fi
$PY - "${ALL[@]}" > "$DIR/seeds.txt" 2>&1 <<'PYEOF'
import glob, math, statistics as st, sys
from scipy import stats
from workbench.analysis.between_runs import folder_savings as f
v = {m: [x for d in sys.argv[1:] for g in sorted(glob.glob(f"{d}/g*/seeds_{m}")) for x in f(g).get("moe", [])]
     for m in ("same", "each")}
if min(len(x) for x in v.values()) < 2 or min(min(x) for x in v.values()) <= 0:
    print(f"seeds: not read ({ {m: len(x) for m, x in v.items()} } processes; a saving at or below 0 has no log)")
else:
    lv = {m: [math.log(x) for x in xs] for m, xs in v.items()}
    F = st.variance(lv["each"]) / st.variance(lv["same"])
    p = stats.f.sf(F, len(lv["each"]) - 1, len(lv["same"]) - 1)
    print(f"seeds: SD of log process savings, same {st.stdev(lv['same']):.4f} ({len(lv['same'])}), each "
          f"{st.stdev(lv['each']):.4f} ({len(lv['each'])}); F {F:.2f}, one-sided p {p:.3g}: "
          + ("the seed drives the spread" if p < 0.05 else "no evidence that the seed drives the spread"))
PYEOF
cat "$DIR/seeds.txt"
