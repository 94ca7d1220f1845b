"""The sink: applies released, commit-ts-ordered changes to the downstream.

The modules here are the apply loop and what it decides: ``run`` (start-up, leadership, the
loop round after round), ``loop`` (one pass: release -> plan -> apply -> trim), ``rounds`` (the
rounds a thread reads ahead), ``batches`` and ``plan`` (cutting and planning them), ``target``
(the downstream as the loop sees it) with ``apply_batch`` (a batch atomic with its checkpoint),
``refused`` and ``drift`` (what the downstream refuses or lacks). The rooms below do the work it
asks for:

- ``ddl/``: what a DDL event does downstream, its text made safe and routed, and running it.
- ``load/``: getting a batch's rows into the downstream (LOAD DATA, INSERT, Spark) and merging them.
- ``db/``: the downstream connection, the checkpoint table, table layouts, each server's SQL and
  errors (dialects).
"""
