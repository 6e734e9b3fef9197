"""Where the checkout's folders are: one owner for the repository root, read by every module that needs a path."""
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The checkout (or the installed tree's parent): README.md, data/, profiles/, notebooks/ live here."""

DATA_DIR = os.path.join(REPO_ROOT, "data")
"""Document-length distributions shipped with the repository (`--lengths data:NAME`)."""
