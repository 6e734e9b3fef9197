#!/usr/bin/env bash
# The merges gpu/jobs/moe_same_host.sh's analysis starts from (CPU): each part's per-GPU campaigns folded into one
# folder per part, beside the per-GPU ones (which stay as they ran):
#   DIR/dose        python -m workbench.ab.dose_merge   (a copy of the first dose campaign, the others merged in)
#   DIR/moe_l8_4k   python -m workbench.ab.processes_merge   (likewise; also moe_q30_l4)
# (the seeds part's runs are one process each, run in place: read by folder_savings where they lie)
# A part with no campaign that ran is skipped and named. Usage: bash gpu/jobs/moe_same_host_merge.sh DIR [DIR2 ...]
# (DIR2 ...: more leases' moe_host folders, fresh seeds by SEED_OFFSET; their campaigns join DIR's)
set -u
DIR=${1:?usage: bash gpu/jobs/moe_same_host_merge.sh DIR [DIR2 ...] (moe_host folders)}
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
