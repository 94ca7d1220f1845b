"""Getting a batch's rows into the downstream: a table's staged rows, the loaders (LOAD DATA,
INSERT, Spark's JDBC) and the policy that picks one, the CSV a LOAD DATA reads, and the merge of a
staging table into its target."""
