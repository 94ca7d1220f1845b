"""The sink: applies released, commit-ts-ordered changes to the downstream.

The modules here are the apply loop (read, plan, apply, trim) and what it decides; the rooms
below it do the work it asks for:

- ``ddl/``: what a DDL event does downstream, and its text made safe and routed.
- ``load/``: getting a batch's rows into the downstream (LOAD DATA, INSERT, Spark) and merging them.
- ``db/``: the downstream connection, its errors and each server's SQL (dialects).
"""
