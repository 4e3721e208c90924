"""Commands that need more than a pass of the engine: ``check`` (:mod:`.check`) and ``schema``
(:mod:`.describe`); :mod:`advcli.api` exposes them with the others."""
