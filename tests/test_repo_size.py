"""The repository stays light: the tracked tree (every file git tracks, as the checkout holds it) is under 80 MB, and
the README's install section states its size."""
import os
import re
import subprocess

import pytest

from workbench.paths import REPO_ROOT

LIMIT_MB = 80


def _tracked_mb() -> float:
    r = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True)
    if r.returncode != 0:
        pytest.skip("not a git checkout")
    names = [n for n in r.stdout.decode().split("\0") if n]
    return sum(os.path.getsize(os.path.join(REPO_ROOT, n)) for n in names
               if os.path.isfile(os.path.join(REPO_ROOT, n))) / 1e6


def test_the_tracked_tree_is_under_80_mb_and_the_readme_says_its_size():
    mb = _tracked_mb()
    assert mb < LIMIT_MB, f"the tracked tree is {mb:.1f} MB (limit {LIMIT_MB}): commit what the README, the " \
                          "notebooks and the tests read; leave the rest in the run's folder (COMMAND.txt reruns it)"
    readme = open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8").read()
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    stated = re.search(r"tracked tree is (?:about )?(\d+) MB", install)
    assert stated, "README's install section states the tracked tree's size"
    assert abs(int(stated.group(1)) - mb) <= 5, f"README says {stated.group(1)} MB, the tree is {mb:.0f} MB"
