"""What the worker (``streams/``) and the sink (``spark_sink/``) share, and nothing else.

- ``model.py``: the change events every codec produces; ``packed.py``: a row as it is staged.
- ``staging/``: the Redis contract between the two sides (keys, scripts, writer, reader).
- ``redis_client.py``, ``kafka_client.py``, ``resp.py``: the clients, built from the settings.
- ``outage.py``, ``startup.py``, ``connectivity.py``: waiting out a service and saying why one
  cannot be reached.
- ``native.py``: the optional Rust wheel and the rule that its Python twin decides.
- ``sql.py``: identifiers quoted for MySQL; ``tso.py``: TiDB timestamps; ``metrics.py``: the
  ``/metrics`` endpoint and the counters both sides write; ``collector.py``: the garbage
  collector's thresholds while a process works through a backlog.

It imports ``config`` and nothing of ``streams``, ``spark_sink`` or ``ticdc_sink`` (lint holds it:
pyproject's import-linter contract).
"""
