"""`python -m workbench.lever_path`: the command of `workbench.ab.lever_path`, kept under its short name (the commands
recorded in profiles/ use it). Nothing lives here."""
if __name__ == "__main__":
    import runpy

    runpy.run_module("workbench.ab.lever_path", run_name="__main__", alter_sys=True)
