"""A fork server for the tests that run the real ``advcli`` command.

``python -m advcli`` spends about a second importing polars, pyarrow, numpy and advcli before
it reads a byte, and the suite runs it some 700 times. This server imports them once and
forks a child per command; the child is then the command: its standard input, output and
error are the pipes the test made (sent over a Unix socket), it runs in the test's folder
with the test's environment, ``advcli.__main__.main()`` runs as the module would, and it ends
the way a process ends (non-daemon threads joined, ``atexit`` handlers run, streams flushed),
its exit status what ``subprocess.run`` would report.

:func:`tests.conftest.run` uses it only where the result cannot differ from a fresh process:
the environment must be the one the server started in (a module may read a variable when it
is imported), apart from ``PYTEST_CURRENT_TEST``. ``ADVCLI_TEST_FORK=0`` turns it off.

Protocol: the test sends a length-prefixed JSON request (``args``, ``cwd``, ``env``) with the
three descriptors for the child's fds 0, 1 and 2; the server answers with the exit code as a
signed 32-bit integer (a negative number: killed by that signal).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import sys

WARM = (
    "numpy",
    "polars",
    "pyarrow.compute",
    "pyarrow.dataset",
    "pyarrow.parquet",
    "pyarrow.json",
    "pyarrow.csv",
    "advcli.api",
    "advcli.reports.page",
)
"""Modules the commands import on first use (numpy, polars and pyarrow through
:mod:`advcli.lazy_imports`), imported by the server so no child pays for them."""
HEADER = struct.Struct("!I")
STATUS = struct.Struct("!i")


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]] | None:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if not data:
        return None
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
        more = conn.recv(1 << 16)
        if not more:
            return None
        data += more
    (size,) = HEADER.unpack_from(data)
    request: dict[str, object] = json.loads(data[HEADER.size : HEADER.size + size])
    return request, list(fds)


def serve(path: str) -> dict[str, object]:
    """Answer requests until the test process goes; return only in a child, with its
    request, once its descriptors, folder and environment are in place."""
    import importlib

    import advcli.__main__  # noqa: F401  (what every command imports, before any fork)
    import advcli.cli.runner  # noqa: F401
    from advcli import versions

    versions.check()
    for name in WARM:  # what commands import when they first need it
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    conn, _ = listener.accept()
    while True:
        received = _receive(conn)
        if received is None:
            sys.exit(0)
        request, fds = received
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            conn.close()
            listener.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            env = request["env"]
            assert isinstance(env, dict)
            os.environ.clear()
            os.environ.update(env)
            os.chdir(str(request["cwd"]))
            return request
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        conn.sendall(STATUS.pack(os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    child = serve(sys.argv[1])
    import advcli.__main__ as command

    args = child["args"]
    assert isinstance(args, list)
    sys.argv = [str(command.__file__), *map(str, args)]
    sys.modules["__main__"] = command
    command.main()
