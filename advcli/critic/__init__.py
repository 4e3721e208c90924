"""Values from your own critic, exported to ONNX and run by ONNX Runtime (CPU or CUDA).

- :mod:`advcli.critic.onnx`: the session, its device and the model contract (:func:`load_critic`);
- :mod:`advcli.critic.batching`: rows as padded batches and outputs back as values (pure numpy);
- :mod:`advcli.critic.scorer`: a critic scoring the batches of a log (``score``, ``annotate``).
- :mod:`advcli.critic.options`: the ``--critic`` options.

Importing this package needs neither onnxruntime (loaded with the first critic) nor polars.
"""

from advcli.critic.onnx import DEFAULT_BATCH_TOKENS, Critic, Scored, load_critic

__all__ = ["DEFAULT_BATCH_TOKENS", "Critic", "Scored", "load_critic"]
