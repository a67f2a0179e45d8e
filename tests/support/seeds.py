"""The seed of a randomised test's choices (a nemesis's faults, a fuzzer's frames): new on every
run, so that CI explores new schedules rather than one, and printed, so that a failure replays.

`RAFKA_SEED=<n>` replays a run; a test may also honour a variable of its own (named in
`run_seed`'s call), which wins over RAFKA_SEED.
"""

from __future__ import annotations

import os

# The variable that replays any seeded test's run.
SEED_VARIABLE = "RAFKA_SEED"


def run_seed(what: str, *, variable: str | None = None) -> int:
    """This run's seed for `what`: from `variable` or RAFKA_SEED when set, else drawn from
    os.urandom. Printed as the line to replay it (pytest shows it with a failure, or with -s)."""
    given = (os.environ.get(variable) if variable else None) or os.environ.get(SEED_VARIABLE)
    seed = int(given) if given else int.from_bytes(os.urandom(4), "big")
    replay = variable or SEED_VARIABLE
    print(f"{what}: seed {seed} ({'given' if given else 'drawn'}; {replay}={seed} replays it)")
    return seed
