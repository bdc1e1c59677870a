"""The operator console: failed messages, queues and actions in the browser (docs/console.md).

One set of handlers (``shared.console.api``) on a small request and response of its own
(``shared.console.http``), served by ``bus console`` on the operator's machine
(``shared.console.local_server``, aiohttp) and, when ``BUS_CONSOLE_ENABLED`` is set, by an
HTTP function of the deployed app (``shared.console.function``). The page itself is the static
folder beside this file; it shows every value as text.
"""
