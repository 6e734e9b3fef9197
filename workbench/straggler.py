"""`python -m workbench.straggler`: the command of `workbench.savings.straggler`, kept under its short name (the commands
recorded in profiles/ use it). Nothing lives here."""
if __name__ == "__main__":
    import runpy

    runpy.run_module("workbench.savings.straggler", run_name="__main__", alter_sys=True)
