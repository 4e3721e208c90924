"""The ``advcli`` command and ``python -m advcli``."""

from advcli._malloc import keep_polars_memory

keep_polars_memory()  # before polars loads

from advcli.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
