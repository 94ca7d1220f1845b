"""The Faust worker: ``app.py`` (the Faust app, its agent and timers), ``line.py`` (the staging
line: threads, backpressure, retries) and ``stager.py`` (records in, one staging round trip out).
"""
