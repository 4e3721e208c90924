"""One module per command: each holds its command's work, from what it was given to the typed
result (:mod:`advcli.results`); :mod:`advcli.api` gathers them and :mod:`advcli.cli` shows them."""
