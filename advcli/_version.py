"""advcli's version, in the lowest layer: every module that records it imports it from here
(``pyproject.toml`` reads it too)."""

__version__ = "0.1.0"
