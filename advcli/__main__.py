"""The ``advcli`` command and ``python -m advcli``.

Ctrl-C while the command line's modules load (typer, orjson, advcli's own) is an interrupt
like any other, not a traceback nor a crash: it is held until they are loaded (an interrupt
raised inside a native module's initialisation can crash the process), then the run ends with
``advcli: interrupted``; numpy, polars and pyarrow load later, on first use, and
:mod:`advcli.lazy_imports` holds a stop the same way while they do. A SIGINT the parent
ignores stays ignored. A dependency older than advcli needs is one line, found before any of
them is imported; so is an estimator plugin that fails to load.
"""

from __future__ import annotations

import os
import signal
import sys


def _interrupted() -> None:
    sys.stderr.write("advcli: interrupted\n")
    sys.stderr.flush()
    os._exit(130)  # as advcli.cli.runner does: sys.exit here would end in SIGINT, not 130


def main() -> None:
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored and hasattr(signal, "pthread_sigmask"):
        # The parent (nohup, a background job) means SIGINT to be ignored. polars installs a
        # native SIGINT handler of its own, which would still stop the run: blocking the
        # signal before any thread exists keeps it from every thread.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    held: list[int] = []
    if not ignored:
        signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        from advcli import versions
        from advcli.errors import AdvcliError

        try:
            versions.check()
            from advcli.cli.runner import main as run
        except AdvcliError as exc:  # an old dependency, a broken estimator plugin
            sys.stderr.write(f"advcli: error: {exc}\n")
            sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    if not ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if held:
            _interrupted()
    from advcli.io.interrupts import arm_for_the_process

    arm_for_the_process()
    run()


if __name__ == "__main__":
    main()
