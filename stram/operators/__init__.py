"""Built-in operators: file input and output (lines, JSON lines, watched directories, Parquet), text
splitting, key counting, event-time windows and joins, generated test data."""
