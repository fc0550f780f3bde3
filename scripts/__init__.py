"""The stram command-line tool (console script `stram`)."""
