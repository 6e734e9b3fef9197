"""`python -m workbench.power`: the command of `workbench.measure.power`, kept under its short name (the commands
recorded in profiles/ use it). Nothing lives here."""
if __name__ == "__main__":
    import runpy

    runpy.run_module("workbench.measure.power", run_name="__main__", alter_sys=True)
