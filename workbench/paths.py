"""Where the checkout's folders are: one owner for the repository root, read by every module that needs a path."""
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The checkout (or the installed tree's parent): README.md, data/, profiles/, notebooks/ live here."""

DATA_DIR = os.path.join(REPO_ROOT, "data")
"""Document-length distributions shipped with the repository (`--lengths data:NAME`)."""

PROFILES_DIR = os.path.join(REPO_ROOT, "profiles")
"""The committed GPU results (`profiles/`): the default of every reader of results."""


def profiles_root(profiles: str | None = None) -> str:
    """`profiles`, else $WB_PROFILES, else the checkout's profiles/ (absolute): the one rule for where results are
    read."""
    return os.path.abspath(profiles or os.environ.get("WB_PROFILES") or PROFILES_DIR)
