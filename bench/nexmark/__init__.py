"""NEXMark on stram and its peers (Flink SQL, Bytewax): the benchmark matrix, checked against the oracle.

``python -m bench.nexmark --help``; what each system runs and the latest figures: bench/README.md.
"""
