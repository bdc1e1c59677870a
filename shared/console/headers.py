"""The headers every answer of the console carries: the page runs only its own script and
style, is never framed, sends no referrer, and no answer is sniffed into another type; the
API's answers are never cached (they hold message contents)."""

from __future__ import annotations

from dataclasses import replace

from shared.console.http import Response

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
ALWAYS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def secured(response: Response, path: str) -> Response:
    """``response`` with the security headers (``no-store`` for the API, ``no-cache`` for the
    page's files, so a new version is fetched)."""
    caching = "no-store" if path.startswith("/api/") else "no-cache"
    return replace(response, headers={**response.headers, **ALWAYS, "Cache-Control": caching})
