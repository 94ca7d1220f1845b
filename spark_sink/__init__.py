"""The writer: applies released, commit-ts-ordered changes to the downstream with PySpark."""
