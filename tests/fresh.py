"""A fresh interpreter, as the Functions host starts one to import ``function_app.py``: what
a module loads or sets up at import can only be seen from outside the test process, which
has imported everything already."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from lab.local.azurite import REPO_ROOT


def run_fresh(
    script: str,
    settings: Mapping[str, str] | None = None,
    *,
    without: tuple[str, ...] = ("BUS_",),
    cwd: Path = REPO_ROOT,
    path: Sequence[Path] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with the test's environment minus the variables whose names start with
    one of ``without`` (so the test's own settings do not leak in), plus ``settings``; the
    repository (then ``path``) is importable."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(without)}
    environ["PYTHONPATH"] = os.pathsep.join(str(p) for p in (REPO_ROOT, *path))
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env={**environ, **(settings or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
