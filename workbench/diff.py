"""`python -m workbench.diff`: the command of `workbench.compare.diff`, kept under its short name (the commands
recorded in profiles/ use it). Nothing lives here."""
if __name__ == "__main__":
    import runpy

    runpy.run_module("workbench.compare.diff", run_name="__main__", alter_sys=True)
