"""The page's files, served from the static folder beside this module by name, never by path:
only the names in ``FILES`` exist, so no request can reach another file."""

from __future__ import annotations

from pathlib import Path

from shared.console.http import Response

FOLDER = Path(__file__).resolve().parent / "static"
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}


def static_file(path: str) -> Response | None:
    """The file served at ``path``, or None when there is none."""
    known = FILES.get(path)
    if known is None:
        return None
    name, content_type = known
    return Response(200, (FOLDER / name).read_bytes(), content_type)
