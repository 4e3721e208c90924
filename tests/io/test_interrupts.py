"""Ctrl-C held back over a step that must not stop halfway."""

import os
import signal
import subprocess
import sys
import threading

import pytest

from advcli.io.interrupts import interrupt_deferred


@pytest.fixture(autouse=True)
def python_sigint():
    """Python's own Ctrl-C handler, as a terminal gives it (a pytest-xdist worker, like a
    background job, starts with SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_inside_the_block_is_raised_after_it():
    steps = []
    with pytest.raises(KeyboardInterrupt), interrupt_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        steps.append("after the signal")  # Python would have run its handler by now
        steps.append("the block ends")
    assert steps == ["after the signal", "the block ends"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_no_ctrl_c_no_interrupt():
    with interrupt_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_off_the_main_thread_it_changes_nothing():
    seen = []

    def run():
        with interrupt_deferred():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]


def test_a_stop_after_an_in_process_run_leaves_the_process_alone():
    """The command line run in-process (a test, a notebook), then a Ctrl-C the caller handles:
    the run's watchdog lets the process be (it used to end it, 10 s later, with exit 130)."""
    code = (
        "import os, signal, sys, time\n"
        "from advcli.io import interrupts\n"
        "from advcli.cli import runner\n"
        "interrupts.GRACE_SECONDS = 0.2\n"
        "try:\n    runner.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "try:\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(5)\n"
        "except KeyboardInterrupt:\n    pass\n"
        "time.sleep(1.0)\nprint('alive')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("alive\n") and "did not stop in time" not in proc.stderr
