"""`python -m workbench.notebook_pages`: the command of `workbench.report.notebook_pages`, kept under its short name (the commands
recorded in profiles/ use it). Nothing lives here."""
if __name__ == "__main__":
    import runpy

    runpy.run_module("workbench.report.notebook_pages", run_name="__main__", alter_sys=True)
