"""The command line of the fixture generators (``wire_v1``, ``stored_v1``, ``wire_v2``): a
fixture is what the first version of its format wrote, so it is written only if absent."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_once(
    program: str,
    description: str | None,
    fixture: Path,
    examples: Callable[[], dict[str, Any]],
    argv: list[str] | None,
) -> int:
    """Write ``examples()`` to ``fixture`` unless it exists (``--force`` rewrites it, which is
    only right before the first version that reads it ships); the exit status."""
    parser = argparse.ArgumentParser(prog=f"python -m {program}", description=description)
    parser.add_argument("--force", action="store_true", help="rewrite an existing fixture")
    args = parser.parse_args(argv)
    if fixture.exists() and not args.force:
        print(f"{fixture} exists: it is what its format's first version wrote; not rewritten")
        return 1
    fixture.write_text(json.dumps(examples(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {fixture}")
    return 0
