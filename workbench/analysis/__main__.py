"""`python -m workbench.analysis [PROFILES]`: the run folders found, and those left out with the reason."""
from workbench.library_clis import run

run("analysis")
