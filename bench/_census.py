"""``tiergate serve`` with an object census on SIGUSR1, for ``bench/memory_soak.py --census``.

On the signal the gateway writes, to the file named by ``BENCH_CENSUS_PATH`` (suffixed with a
count), how many objects of each type the garbage collector tracks and their shallow bytes, and the
largest dicts, lists, deques and sets with their owner's type when one holds them as an attribute.
Two censuses, a third of the way in and at the end, name what grows (docs/reliability.md).

    BENCH_CENSUS_PATH=/tmp/census python -m bench._census serve --port 8080
"""

from __future__ import annotations

import collections
import gc
import json
import os
import signal
import sys
from types import FrameType

from gateway.tools.cli import main

CONTAINERS = (dict, list, set, collections.deque, collections.OrderedDict)


def census() -> dict[str, object]:
    gc.collect()
    objects = gc.get_objects()
    counts: collections.Counter[str] = collections.Counter()
    sizes: collections.Counter[str] = collections.Counter()
    big = []
    for o in objects:
        name = type(o).__qualname__
        counts[name] += 1
        try:
            sizes[name] += sys.getsizeof(o)
        except TypeError:
            continue
        if isinstance(o, CONTAINERS) and len(o) > 2000:
            big.append(o)
    holders = []
    for o in big:
        owners = []
        for r in gc.get_referrers(o):
            if r is objects or r is big:
                continue
            if isinstance(r, dict):  # an instance's __dict__, or a module's: the attribute's name
                owners += [f"attribute {k}" for k, v in r.items() if v is o][:1]
            else:
                owners.append(f"{type(r).__module__}.{type(r).__qualname__}")
        owners = owners[:3]
        holders.append({"type": type(o).__qualname__, "len": len(o), "owners": owners})
    holders.sort(key=lambda h: -int(h["len"]))  # type: ignore[call-overload]
    return {"counts": dict(counts.most_common(60)), "bytes": dict(sizes.most_common(60)), "big": holders[:40]}


def dump(_signum: int, _frame: FrameType | None) -> None:
    dump.n = getattr(dump, "n", 0) + 1  # type: ignore[attr-defined]
    path = f"{os.environ['BENCH_CENSUS_PATH']}.{dump.n}.json"  # type: ignore[attr-defined]
    with open(path, "w") as out:
        json.dump(census(), out, indent=1)


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, dump)
    sys.exit(main())
