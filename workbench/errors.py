"""User-facing errors: the CLIs print these as one line and exit non-zero, without a traceback."""


class WorkbenchError(Exception):
    """Bad input or an unsupported request; the message is shown to the user as is."""


class UnsupportedArm(WorkbenchError):
    """An arm (or backend) that this device or model cannot run."""


class EditedRun(WorkbenchError):
    """A run folder whose results.csv is not the file its summary.json records (size, sha256): edited or cut after
    the run; every reader refuses it."""
