"""`python -m workbench.readme_results`: the command of `workbench.report.readme`, kept under its short name (the commands
recorded in profiles/ use it). Nothing lives here."""
if __name__ == "__main__":
    import runpy

    runpy.run_module("workbench.report.readme", run_name="__main__", alter_sys=True)
