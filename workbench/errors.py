"""User-facing errors: the CLIs print these as one line and exit non-zero, without a traceback."""
import errno


class WorkbenchError(Exception):
    """Bad input or an unsupported request; the message is shown to the user as is."""


class UnsupportedArm(WorkbenchError):
    """An arm (or backend) that this device or model cannot run."""


class EditedRun(WorkbenchError):
    """A run folder whose results.csv is not the file its summary.json records (size, sha256): edited or cut after
    the run; every reader refuses it."""


def write_fault(e: OSError) -> str:
    """One line naming why a write failed: `could not write DIR/results.csv: No space left on device (the disk is
    full)`."""
    what = f"could not write {e.filename}" if e.filename else "a write failed"
    why = e.strerror or str(e) or type(e).__name__
    hint = {errno.ENOSPC: " (the disk is full)", errno.EDQUOT: " (the disk quota is used up)",
            errno.EROFS: " (a read-only file system)", errno.EACCES: " (permissions)"}.get(e.errno, "")
    return f"{what}: {why}{hint}"
