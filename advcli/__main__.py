"""The ``advcli`` command and ``python -m advcli``."""

from advcli.cli import main

if __name__ == "__main__":
    main()
