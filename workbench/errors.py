"""User-facing errors: the CLIs print these as one line and exit non-zero, without a traceback."""


class WorkbenchError(Exception):
    """Bad input or an unsupported request; the message is shown to the user as is."""


class UnsupportedArm(WorkbenchError):
    """An arm (or backend) that this device or model cannot run."""
