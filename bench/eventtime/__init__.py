"""Event-time operators: :mod:`.bench_windows` times the window operators in process beside a plain loop."""
