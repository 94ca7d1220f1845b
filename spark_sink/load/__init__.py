"""Getting a batch's rows into the downstream: a table's staged rows (``staged``), the batch's
tables and their staging tables (``staging_tables``), the loaders (LOAD DATA, INSERT, Spark's
JDBC) and the policy that picks one (``loaders``), the CSV a LOAD DATA reads (``csv_rows``), the
merge of a staging table into its target (``merge``), and the Spark session
(``spark_session``), started beside the loop (``spark_start``)."""
