"""The worker: Faust consumers that decode TiCDC's messages and stage them in Redis.

- ``codecs/``: bytes -> events, one module per protocol (pure: no Kafka, Redis or Spark).
- ``worker/``: the Faust app, its staging line and the stager; ``transport.py``: messages
  handed to the line past Faust's streams.
- ``large_messages.py``, ``claim_check.py``, ``upstream.py``: making cut-down messages whole.
- ``schema_store.py``: the Simple protocol's schemas; ``idle.py``, ``progress.py``,
  ``status.py``, ``metrics.py``: a partition's progress as the worker and operators see it.
"""
