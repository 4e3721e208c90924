"""Ctrl-C held back over a step that must not stop halfway."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from advcli.io import writers
from advcli.io.interrupts import interrupt_deferred
from tests.conftest import group_log, write_jsonl, write_parquet


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


def _big_log(tmp_path: Path) -> str:
    return write_parquet(tmp_path / "big.parquet", group_log(6000, 8))


def _start(*args: str, ignore_sigint: bool = False) -> subprocess.Popen:
    import signal

    def disposition() -> None:  # explicit: a test run in the background ignores SIGINT
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint else signal.SIG_DFL)
        for stop in (signal.SIGTERM, signal.SIGHUP):  # (a job runner may ignore these too)
            signal.signal(stop, signal.SIG_DFL)

    command_line = [sys.executable, "-m", "advcli", *args]
    return subprocess.Popen(
        command_line, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=disposition
    )


def _when_writing(tmp_path: Path, proc: subprocess.Popen) -> None:
    import time

    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".*.tmp")) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches /proc")
@pytest.mark.parametrize("command", ["annotate", "shard"])
@pytest.mark.parametrize("when", ["starting", "writing"])
def test_ctrl_c_is_one_line_and_exit_130(tmp_path, command, when):
    import signal
    import time

    log = _big_log(tmp_path)
    out = tmp_path / ("out.jsonl" if command == "annotate" else "sh")
    proc = _start(command, log, "--method", "grpo", "--out", str(out))
    if when == "starting":  # while the libraries load: once pyarrow's is mapped
        maps = Path(f"/proc/{proc.pid}/maps")
        while "pyarrow" not in maps.read_text() and proc.poll() is None:
            time.sleep(0.001)
    else:
        _when_writing(tmp_path, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate()
    assert proc.returncode == 130, err
    assert err == b"advcli: interrupted\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.parquet"]


@pytest.mark.parametrize("command", ["annotate", "shard", "score"])
@pytest.mark.parametrize(("stop", "code"), [("SIGTERM", 143), ("SIGHUP", 129)])
def test_sigterm_and_sighup_end_a_run_as_ctrl_c_does(tmp_path, command, stop, code):
    """A scheduler's stop or a closed terminal: one line, exit 128 + the signal, no temporary
    left beside the output."""
    import signal

    log = write_parquet(tmp_path / "big.parquet", group_log(20000, 8))
    out = tmp_path / ("out.jsonl" if command != "shard" else "sh")
    if command == "score":
        pytest.importorskip("onnxruntime")
        from bench.critic_model import build_critic, make_weights

        build_critic(tmp_path / "c.onnx", make_weights(vocab=1000, dim=8, hidden=8))
    args = ["--critic", str(tmp_path / "c.onnx")] if command == "score" else ["--method", "grpo"]
    for _ in range(3):  # a loaded machine may finish the run before the signal lands: again
        proc = _start(command, log, *args, "--out", str(out), "--force")
        _when_writing(tmp_path, proc)
        proc.send_signal(getattr(signal, stop))
        _, err = proc.communicate()
        if proc.returncode != 0:
            break
    assert (proc.returncode, err) == (code, b"advcli: terminated\n")
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".onnx") == ["big.parquet"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches /proc")
@pytest.mark.parametrize("library", ["orjson", "polars", "pyarrow"])
def test_ctrl_c_while_a_native_module_loads_is_held_until_it_has(tmp_path, library):
    """An interrupt raised inside a native module's initialisation could crash the process
    (orjson's did: SIGSEGV, nothing said); it is held until the modules are loaded."""
    import signal
    import time

    log = _big_log(tmp_path)
    if library == "polars":  # it reads JSONL logs (loaded on first use, as numpy and pyarrow)
        log = write_jsonl(tmp_path / "big.jsonl", pq.read_table(log).to_pylist())
    for _ in range(3):
        proc = _start("schema", log)
        maps = Path(f"/proc/{proc.pid}/maps")
        while proc.poll() is None and library not in maps.read_text():
            time.sleep(0.0005)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate()
        assert (proc.returncode, err) == (130, b"advcli: interrupted\n")


def test_ctrl_c_is_ignored_when_the_parent_ignores_it(tmp_path):
    import signal

    log = _big_log(tmp_path)
    out = tmp_path / "out.jsonl"
    proc = _start("annotate", log, "--method", "grpo", "-q", "--out", str(out), ignore_sigint=True)
    _when_writing(tmp_path, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert writers.read_metadata(str(out)) is not None
