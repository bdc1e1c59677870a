"""Format 2 of every record ``wire_v1.py`` and ``stored_v1.py`` hold (the first format plus
its version: ``shared.bus.formats``), as this version writes them, for
``fixtures/wire_v2.json``.

Same rules as ``wire_v1.py``: written once by the version that introduced format 2, checked
in, never rewritten; later versions must still read it. ``python -m tests.formats.wire_v2``
writes the file only if it is absent."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tests.formats import stored_v1, wire_v1

FIXTURE = Path(__file__).parent / "fixtures" / "wire_v2.json"
VERSION = 2


def examples() -> dict[str, Any]:
    """Every example in format 2, as text or entity exactly as it is stored or sent."""
    return {**wire_v1.examples(VERSION), **stored_v1.examples(VERSION)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.formats.wire_v2", description=__doc__)
    parser.add_argument("--force", action="store_true", help="rewrite an existing fixture")
    args = parser.parse_args(argv)
    if FIXTURE.exists() and not args.force:
        print(f"{FIXTURE} exists: it is what format 2's first version wrote; not rewritten")
        return 1
    FIXTURE.write_text(json.dumps(examples(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
