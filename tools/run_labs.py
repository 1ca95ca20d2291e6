"""Moved to booktools/run.py: `python -m booktools.run --on "p=1 p=3"` (make test-any-p), `--on gpu
--timeout 480 --log FILE` (make test-gpu). This alias maps the old options to it: --any-p, --gpu,
--rehearse, --timeout, --log, and --setting NAME:VAR=VALUE,... (those variables set, asserts only).
ANY_P stays here for the intro page."""
import os
import sys

from booktools.conditions import parse
from booktools.run import ANY_P as ANY_P_PASSES, main

ANY_P = {spec: parse(spec).environment() for spec in ANY_P_PASSES.split()}


def alias(args: list[str]) -> int:
    settings, on = [], []
    while "--setting" in args:
        at = args.index("--setting")
        settings.append(args[at + 1] if at + 1 < len(args) else "")
        del args[at:at + 2]
    for flag, spec in (("--any-p", ANY_P_PASSES), ("--gpu", "gpu")):
        if flag in args:
            args.remove(flag)
            on.append(spec)
    if "--parallel" in args or not (on or settings):
        sys.exit("run_labs.py: name --any-p, --gpu or --setting (--parallel is gone: a second learner "
                 "runs beside a pass, python -m booktools.run --on two=N)")
    shell = dict(os.environ)
    for setting in settings:  # each: its variables in the environment, one pass, asserts only
        name, _, assignments = setting.partition(":")
        env = dict(a.split("=", 1) for a in assignments.split(",") if "=" in a)
        if not name or not env:
            sys.exit(f"--setting {setting!r}: write it as NAME:VAR=VALUE[,VAR=VALUE]")
        os.environ.clear()
        os.environ.update({**shell, **env})
        if main([*args, "--asserts-only", "--on", "quiet"]):
            return 1
    return main([*args, "--on", " ".join(on)]) if on else 0


if __name__ == "__main__":
    sys.exit(alias(sys.argv[1:]))
