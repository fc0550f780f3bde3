"""NEXMark for stram: the suite's event generator (persons, auctions, bids), a query oracle and the
queries on stram.

``python -m stram.nexmark generate`` writes a data set, ``python -m stram.nexmark oracle`` answers a
query over it without any engine, ``python -m stram.nexmark run`` runs a query on stram
(``stram.nexmark.queries``, written with the dataflow API); ``stram.nexmark.generator`` also serves
events from any index as a stream source. docs/nexmark.md describes the generator's rules, the
queries' semantics and how each query is built on stram.
"""

#: a fixed default base time (2023-11-14T22:13:20Z, a multiple of 10 s) so outputs are reproducible (here,
#: not in the model, so that the command line needs neither numpy nor pyarrow)
DEFAULT_BASE_TIME_MS = 1_700_000_000_000
