"""GPU benchmark suites (each also runs on CPU with --smoke)."""
