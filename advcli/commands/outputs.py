"""What ``annotate`` and ``score`` share about their output: the checks made before reading,
and the log's columns they write back as they came."""

from __future__ import annotations

from advcli.errors import UsageError
from advcli.io.outputs import check_output_folder
from advcli.io.writers import NONFINITE
from advcli.run.logs import Log


def passed_through(log: Log) -> list[str]:
    """The log's columns that no role reads: written as they came."""
    read = set(log.roles.columns.values())
    return [name for name in log.source.schema.names if name not in read]


def check_nonfinite(nonfinite: str) -> None:
    if nonfinite not in NONFINITE:
        msg = f"`nonfinite={nonfinite!r}`: expected one of {', '.join(NONFINITE)}"
        raise UsageError(msg)


def check_parts_output(out: str, fmt: str | None, files: list[str], *, force: bool) -> None:
    """``--out`` of ``--engine ray``: a folder of Parquet parts, refused as output folders are."""
    if fmt not in (None, "parquet") or out == "-":
        shown = f"`format={fmt!r}`" if fmt not in (None, "parquet") else "`out='-'`"
        raise UsageError(f"{shown}: `engine='ray'` writes Parquet parts into a folder")
    from advcli.on_ray import tasks as on_ray  # Ray's side is imported only when used

    check_output_folder(out, files, force=force, listed=on_ray.listed_parts)
