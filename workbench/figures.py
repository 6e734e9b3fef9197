"""`python -m workbench.figures`: the command of `workbench.report.figures`, kept under its short name (the commands
recorded in profiles/ use it). Nothing lives here."""
if __name__ == "__main__":
    import runpy

    runpy.run_module("workbench.report.figures", run_name="__main__", alter_sys=True)
