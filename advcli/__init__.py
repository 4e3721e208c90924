"""advcli: offline advantages for logged LLM reinforcement-learning rollouts."""

__version__ = "0.1.0"
