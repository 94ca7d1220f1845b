"""`ticdc-sink check`: the downstream compared with the upstream TiDB at the checkpoint's ts.

The sink commits every batch with its checkpoint, so the downstream inside one consistent-snapshot
read transaction is the upstream as of the checkpoint ts it holds, which TiDB reads back with
``tidb_snapshot``. Each table is cut into key ranges (:mod:`.chunks`), each range checksummed in
SQL on both servers in one text form (:mod:`.canonical`), and only ranges whose checksums differ
are read row by row (:mod:`.compare`).
"""
