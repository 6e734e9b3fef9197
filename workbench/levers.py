"""`python -m workbench.levers`: the command of `workbench.traces.levers`, kept under its short name (the commands
recorded in profiles/ use it). Nothing lives here."""
if __name__ == "__main__":
    import runpy

    runpy.run_module("workbench.traces.levers", run_name="__main__", alter_sys=True)
