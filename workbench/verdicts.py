"""`python -m workbench.verdicts`: the command of `workbench.savings.verdicts_cli`, kept under its short name (the commands
recorded in profiles/ use it). Nothing lives here."""
if __name__ == "__main__":
    import runpy

    runpy.run_module("workbench.savings.verdicts_cli", run_name="__main__", alter_sys=True)
