"""Writes the sessions example's click events: ``python -m scripts.eventdata [OUT] [--seed S]``.

Users click in bursts (sessions) over an hour of event time; events reach the
file up to five seconds out of order, and a few arrive minutes late. The file
is deterministic for a seed, so the example's summary is the same on every
machine.
"""

from __future__ import annotations

import argparse
import json
import random

START_MS = 1_700_000_000_000
DISORDER_MS = 5_000
PAGES = ["/", "/search", "/item", "/cart", "/checkout", "/help"]


def events(seed: int = 7, users: int = 40, hour_ms: int = 3_600_000) -> list[dict]:
    """Click events in arrival order."""
    rng = random.Random(seed)
    clicks = []
    for u in range(users):
        t = START_MS + rng.randrange(600_000)
        while t < START_MS + hour_ms:
            for _ in range(rng.randint(1, 12)):  # a burst: clicks a few seconds apart
                clicks.append({"user": f"u{u:02d}", "page": rng.choice(PAGES), "ts": t})
                t += rng.randint(500, 20_000)
            t += rng.randint(60_000, 900_000)  # away: the session ends
    clicks.sort(key=lambda c: c["ts"])
    arrived = []
    for c in clicks:  # arrival: a little out of order, within the bound
        arrived.append((c["ts"] + rng.randrange(DISORDER_MS), c))
    arrived.sort(key=lambda pair: pair[0])
    out = [c for _, c in arrived]
    for i in rng.sample(range(200, len(out)), len(out) // 100):  # about 1% arrive ten minutes late
        late = dict(out[i - 150], late=True)
        late["ts"] = out[i]["ts"] - 600_000
        out.insert(i, late)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="specs/data/clicks.jsonl")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with open(args.out, "w") as f:
        for e in events(args.seed):
            f.write(json.dumps(e, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
