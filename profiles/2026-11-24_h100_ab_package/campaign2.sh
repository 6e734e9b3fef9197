#!/usr/bin/env bash
# 2026-11-24, second lease: the restructured A/B runner on CUDA (its nsys child now gets the config as JSON), and the
# qwen3-30b-a3b fidelity ratio with 12 reps instead of 6.
set -u
R=/tmp/wb/c2; mkdir -p $R/logs
J=$R/logs/jobs.txt
job() { local name=$1; shift; echo "$(date +%T) start $name: $*" >> $J;
        "$@" > $R/logs/$name.out 2> $R/logs/$name.err; echo "$(date +%T) end $name rc $?" >> $J; }
job nsys_check python3 -m workbench.ab --opt packing --headline --model qwen3-0.6b --layers 4 --reps 4 --trace nsys --out $R/nsys_check
job fid_qwen3moe_12 python3 -m workbench.fidelity --model qwen3-30b-a3b --layers 8 --tokens 8192 --reps 12 --out $R/fid_qwen3moe_12
echo "$(date +%T) ALL DONE" >> $J
cd /tmp/wb && tar --exclude='*.json.gz' --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='*.pt.trace.json' -czf /tmp/wb/c2.tgz c2
