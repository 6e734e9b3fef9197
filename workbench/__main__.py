"""`python -m workbench COMMAND ...`: the `workbench` console script (`workbench.commands`)."""
import sys

from workbench.commands import main

if __name__ == "__main__":
    sys.exit(main())
