"""`python -m workbench.gate`: the command of `workbench.compare.gate`, kept under its short name (the commands
recorded in profiles/ use it). Nothing lives here."""
if __name__ == "__main__":
    import runpy

    runpy.run_module("workbench.compare.gate", run_name="__main__", alter_sys=True)
