"""The timed results of this folder's runs, recomputed as profiles/2026-11-25_h100_levers_path/recount.py does
(the rep as the unit, MFU from the useful work, each optimized arm against an anchor timed beside it). Run from the
repository root:

    python profiles/2026-11-25_h100_levers/recount.py
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

if __name__ == "__main__":
    recount = runpy.run_path(os.path.join(HERE, "..", "2026-11-25_h100_levers_path", "recount.py"))
    sys.exit(recount["main"](HERE, ("llama_levers", "gptoss8k_levers", "gptoss16k_flex", "qwen3moe_split")))
