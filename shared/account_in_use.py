"""The storage account a tool is about to use, said before it does anything.

``bus``, the audit and the bulk jobs print one line on stderr, before their work, naming the
account, its blob endpoint and where the connection came from, e.g.
``account devstoreaccount1 (http://127.0.0.1:10000/devstoreaccount1) from AzureWebJobsStorage
in local.settings.json``; a ``--json`` report carries the same as an ``account`` object. A
user whose settings point somewhere else than they think sees it at once. Never a key or a
SAS: only the account's name and the endpoint's scheme, host, port and path are shown.
"""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from shared.connection_sources import ConnectionSource
from shared.logsafe import shown
from shared.settings import StorageSettings, parse_connection_string

PUBLIC_SUFFIX = "core.windows.net"


@dataclass(frozen=True)
class AccountInUse:
    name: str
    endpoint: str
    """The blob endpoint, without query, fragment or user info."""
    source: ConnectionSource | None
    """The setting and source the connection came from (None: not known)."""

    @classmethod
    def of(cls, storage: StorageSettings) -> AccountInUse:
        name, endpoint = _account(storage)
        return cls(name, endpoint, storage.source)

    def line(self) -> str:
        """One printable line (every part escaped: names and paths come from outside)."""
        text = f"account {shown(self.name)} ({shown(self.endpoint)})"
        if self.source is not None:
            text += f" from {shown(self.source.setting)} {shown(self.source.where())}"
        return text

    def as_json(self) -> dict[str, str | None]:
        """``setting`` and ``source`` (``command line``, ``environment`` or the settings
        file's path) are None when not known."""
        return {
            "name": self.name,
            "endpoint": self.endpoint,
            "setting": self.source.setting if self.source else None,
            "source": self.source.origin if self.source else None,
        }


def announce_account(storage: StorageSettings, tool: str) -> AccountInUse:
    """Say on stderr which account ``tool`` uses and where that came from."""
    account = AccountInUse.of(storage)
    print(f"{tool}: {account.line()}", file=sys.stderr, flush=True)
    return account


def _account(storage: StorageSettings) -> tuple[str, str]:
    """The account's name and blob endpoint."""
    if storage.connection_string is None:
        endpoint = _bare(storage.blob_service_uri or "")
        return _name_in(endpoint), endpoint
    parts = parse_connection_string(storage.connection_string)
    name = parts.get("AccountName", "")
    given = parts.get("BlobEndpoint")
    if given:
        endpoint = _bare(given)
    elif name:
        scheme = parts.get("DefaultEndpointsProtocol", "https")
        endpoint = f"{scheme}://{name}.blob.{parts.get('EndpointSuffix', PUBLIC_SUFFIX)}"
    else:
        endpoint = "?"
    return name or _name_in(endpoint), endpoint


def _bare(uri: str) -> str:
    """``uri`` without what may carry a secret (a SAS query, user info) or nothing useful."""
    try:
        split = urlsplit(uri.strip())
        port = split.port
    except ValueError:  # not a URI; the connection fails on it, saying so
        return "?"
    host = split.hostname or ""
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((split.scheme, netloc, split.path.rstrip("/"), "", "")) or "?"


def _name_in(endpoint: str) -> str:
    """The account an endpoint names: the first label of a public host
    (``acct.blob.core.windows.net``), the first path segment of an emulator's
    (``http://127.0.0.1:10000/devstoreaccount1``)."""
    split = urlsplit(endpoint)  # already _bare: parses
    host = split.hostname or ""
    if host == "localhost" or _is_address(host):
        return split.path.strip("/").split("/")[0] or "?"
    return host.split(".")[0] or "?"


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
