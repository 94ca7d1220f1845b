"""The Faust worker: ``run.py`` (start-up, Faust's worker until stopped), ``app.py`` (the Faust
app and its wiring), ``line.py`` (the staging line: threads, Redis retries), ``stager.py``
(records in, one staging round trip out), ``backpressure.py``, ``timers.py``, ``topics.py``.
"""
