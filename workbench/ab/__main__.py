"""`python -m workbench.ab` (and `torchrun ... -m workbench.ab`)."""
import os
import sys


def _help(argv=None) -> int:
    """--help without importing torch (the room that parses)."""
    from workbench.ab.cli import parse_args
    parse_args(argv)
    return 0


def _run(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from workbench.ab import preflight
    from workbench.ab.cli import parse_args
    args = parse_args(argv)  # the one parse: every flag, --processes included, read from its result
    if args.processes > 1:  # K processes of this command, then the process-level estimate
        from workbench.ab import processes
        return processes.main(argv, args)
    preflight.check_early(args)  # every mistake the flags and presets show, before torch is imported
    from workbench.ab.session import main  # imported here: a bad $WORKBENCH_OPTS is one line, not a traceback
    return main(argv, args)


if __name__ == "__main__":
    from workbench import interrupts
    interrupts.exit_at_once()  # until the run has a folder (session: `interrupts.raise_from_now_on`)
    try:  # Ctrl-C at any moment, imports and teardown included: `interrupted`, exit 130, no traceback
        from workbench.cli import run_main
        _rc = run_main(_help if any(a in ("-h", "--help") for a in sys.argv[1:]) else _run)
        if "torch" in sys.modules:
            import torch
            if torch.cuda.is_initialized():
                # Everything is written and closed by now. On the H100 a traced run whose verdicts step had failed
                # printed its last line and then never exited (interpreter teardown of CUDA / the profiler, not
                # reproduced): skip the teardown rather than hold a campaign until its job limit.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(_rc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        _rc = 130
    if _rc == 130:  # the folder is marked and closed; the teardown of half-imported modules could still raise
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_rc)
    sys.exit(_rc)
