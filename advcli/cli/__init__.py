"""The ``advcli`` command line, a thin layer over the commands' functions
(:mod:`advcli.commands`, gathered in :mod:`advcli.api`): the commands
(:mod:`.app`), their options (:mod:`.options`), and the process that runs them
(:mod:`.runner`, whose :func:`~advcli.cli.runner.main` is the entry point)."""
