"""NEXMark for stram: the suite's event generator (persons, auctions, bids) and a query oracle.

``python -m stram.nexmark generate`` writes a data set, ``python -m stram.nexmark oracle`` answers a
query over it without any engine; ``stram.nexmark.generator`` also serves events from any index as a
stream source. docs/nexmark.md describes the generator's rules and the queries' semantics.
"""
