"""Every app setting, declared once: its name, default, what it accepts and what it does.

This list is the single source of truth for the settings the app reads. ``read`` parses a
value with its declaration (a bad one is a ``ConfigurationError`` naming the setting, where
its value came from and what it accepts), ``shared.config.build_config`` reads them all once
at start-up, and the table of docs/settings.md is generated from it (``python -m
shared.config``; a test fails when the two differ).

Only ``shared.errors`` is imported here, so that ``shared.settings`` (the resolver) can parse
the storage timeouts with these declarations too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from shared.errors import ConfigurationError

T = TypeVar("T")

DAY = 24 * 3600
WEEK = 7 * DAY
CENTURY = 36500 * DAY
"""The longest window a setting accepts (a longer one would overflow a date)."""
MAX_DELIVERIES_CEILING = 3000
"""Deliveries one incoming message may cause. In the compact format (``shared.bus.deliveries``)
an outbox record takes at most 260 bytes a delivery (40-character endpoint names), 780 KB for
3,000, within Table Storage's 1 MiB entity with room for the rest of the record; the audit
row's list of what the message caused (id, type and destination, about 200 bytes a delivery
with short names) is the tighter of the two for long type names. The bus checks both real
sizes too (``shared.bus.outgoing.check_deliveries``)."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One app setting. ``parse`` turns a non-blank value into ``T`` or raises ValueError;
    an unset or blank setting takes ``default``."""

    name: str
    default: T
    accepts: str
    """What a value must be, as the error message and the docs say it."""
    description: str
    group: str
    parse: Callable[[str], T]
    shown_default: str
    """The default as the docs show it."""


def read(setting: Setting[T], values: Mapping[str, str], origin: str | None = None) -> T:
    """The value of ``setting`` in ``values`` (its default when unset or blank). ``origin``
    says in the error where the value came from (the environment, local.settings.json...)."""
    raw = values.get(setting.name, "")
    if not raw.strip():
        return setting.default
    try:
        return setting.parse(raw.strip())
    except ValueError:
        where = f" (from the {origin})" if origin else ""
        raise ConfigurationError(
            f"app setting {setting.name}={raw.strip()[:80]!r}{where} is not accepted: it must "
            f"be {setting.accepts}"
        ) from None


def _number(text: str, low: float, high: float, *, open_low: bool) -> float:
    value = float(text)
    if not math.isfinite(value) or value > high or value < low or (open_low and value == low):
        raise ValueError(text)
    return value


def _amount(amount: float) -> str:
    """Seconds as the docs show them: 604800 (7 days)."""
    shown = f"{int(amount)}" if amount == int(amount) else f"{amount:g}"
    if amount >= DAY and amount % DAY == 0:
        days = int(amount // DAY)
        return f"{shown} ({days} day{'s' * (days != 1)})"
    return shown


def seconds(
    name: str,
    default: float,
    description: str,
    *,
    group: str,
    low: float = 0.0,
    open_low: bool = True,
    high: float = CENTURY,
) -> Setting[float]:
    """A number of seconds: above ``low`` (or from it, ``open_low=False``) up to ``high``."""
    above = f"above {_amount(low)}" if open_low else f"at least {_amount(low)}"
    return Setting(
        name,
        default,
        f"a number of seconds {above} and at most {_amount(high)}",
        description,
        group,
        lambda text: _number(text, low, high, open_low=open_low),
        _amount(default),
    )


def whole(
    name: str, default: int, description: str, *, group: str, low: int, high: int
) -> Setting[int]:
    """A whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(text)
        return value

    return Setting(
        name,
        default,
        f"a whole number from {low} to {high}",
        description,
        group,
        parse,
        str(default),
    )


TRUE = ("true", "1", "yes")
FALSE = ("false", "0", "no")


def flag(name: str, description: str, *, group: str, default: bool = False) -> Setting[bool]:
    """On or off, off unless ``default`` says otherwise."""

    def parse(text: str) -> bool:
        if text.lower() in TRUE:
            return True
        if text.lower() in FALSE:
            return False
        raise ValueError(text)

    return Setting(
        name,
        default,
        "true or false (also 1/0, yes/no)",
        description,
        group,
        parse,
        str(default).lower(),
    )


def text(
    name: str, default: str | None, accepts: str, description: str, *, group: str
) -> Setting[str | None]:
    """Text, checked where it is used (a connection string, a URL, an app reference)."""
    return Setting(
        name, default, accepts, description, group, lambda value: value, default or "unset"
    )


# --- The declarations ----------------------------------------------------------------------

APP = "app and storage"
TIMEOUTS = "storage timeouts"
BUS = "bus"
POSTGRES = "PostgreSQL"
COSMOS = "Cosmos DB"
CLEANUP = "cleanup"
EFFECTS = "effects"
CONSOLE = "console"
PLATFORM = "set by the platform"

BUS_APP = text(
    "BUS_APP",
    None,
    "package.module:attribute naming a BusApp",
    "the app every process runs (docs/writing-endpoints.md); unset: the sample app, "
    "shared.sample.app:app",
    group=APP,
)
APP_NAME_MAX_CHARS = 33
"""The longest app name: the app's effects performer is the endpoint ``<name>effects``, and
an endpoint name has at most 40 characters (``shared.resources.check_endpoint_name``); every
other name derived from it is shorter (``<name>operatoractions``, ``<name>-discarded``)."""
_APP_NAME = re.compile(rf"[a-z][a-z0-9]{{0,{APP_NAME_MAX_CHARS - 1}}}")


def _app_name(value: str) -> str:
    if not _APP_NAME.fullmatch(value):
        raise ValueError(value)
    return value


APP_NAME_ACCEPTS = f"1-{APP_NAME_MAX_CHARS} lowercase letters and digits, starting with a letter"
APP_NAME: Setting[str | None] = Setting(
    "BUS_APP_NAME",
    None,
    APP_NAME_ACCEPTS,
    "the app's name among the apps of a system sharing one messaging account, over "
    "`BusApp(name=...)`: it prefixes the app's own tables and containers (ingress, cleanup, "
    "journal, discarded archive, audits) and its effects performer, so that no two apps "
    "collide (docs/adopting.md); unset and undeclared: today's unprefixed names, one app "
    "per account",
    APP,
    _app_name,
    "unset",
)
STORAGE_SETTING = text(
    "BUS_STORAGE_SETTING",
    "AzureWebJobsStorage",
    "the name of a connection setting",
    "which connection setting names the messaging account: the one the queue triggers, "
    "`bus`, the audit and the bus's queues, tokens, payloads, topics and parked messages use",
    group=APP,
)
STATE_STORAGE_SETTING = text(
    "BUS_STATE_STORAGE_SETTING",
    None,
    "the name of a connection setting (the same forms as the messaging connection)",
    "which connection setting names the app's state account: its endpoints' tables (state, "
    'outbox records, audit rows, effect markers; docs/architecture.md, "Two storage '
    'roles"); unset: the messaging connection (BUS_STORAGE_SETTING), one account as before',
    group=APP,
)
CONNECTION = text(
    "AzureWebJobsStorage",
    None,
    "a connection string, UseDevelopmentStorage=true, or unset with identity-based "
    "AzureWebJobsStorage__accountName or __blobServiceUri, __queueServiceUri and "
    "__tableServiceUri (optionally __credential=managedidentity and __clientId)",
    "the messaging account (the connection setting BUS_STORAGE_SETTING names), and the state "
    "account too unless BUS_STATE_STORAGE_SETTING names another; required by every "
    "command that touches storage, never a silent fallback to the emulator",
    group=APP,
)

CONNECT_TIMEOUT = seconds(
    "BUS_STORAGE_CONNECT_TIMEOUT",
    3.0,
    "per HTTP attempt to storage: time to connect",
    group=TIMEOUTS,
    high=3600,
)
READ_TIMEOUT = seconds(
    "BUS_STORAGE_READ_TIMEOUT",
    5.0,
    "per HTTP attempt to storage: longest silence while reading an answer",
    group=TIMEOUTS,
    high=3600,
)
CALL_TIMEOUT = seconds(
    "BUS_STORAGE_CALL_TIMEOUT",
    8.0,
    "one store call, SDK retries included; then it fails with OutcomeUnknown (a queue worker "
    "logs it and backs off; a handler's message is retried later). At least the connect and "
    "read timeouts",
    group=TIMEOUTS,
    high=3600,
)
INGRESS_TIMEOUT = seconds(
    "BUS_INGRESS_TIMEOUT",
    12.0,
    "one `POST /api/messages` or request to one of the app's own web routes, all its storage "
    "calls included; then 503 (retry with the same key). At least the call timeout",
    group=TIMEOUTS,
    high=3600,
)

INGRESS_WINDOW = seconds(
    "BUS_INGRESS_WINDOW_SECONDS",
    float(WEEK),
    "how long client retries with one Idempotency-Key are deduplicated (the ingress record's "
    "window, `shared.bus.ingress`)",
    group=BUS,
)

SESSION_RESEND = seconds(
    "BUS_SESSION_RESEND_SECONDS",
    60.0,
    "how long after its commit a transactional session whose request stopped before "
    "signalling its messages waits for the cleanup to signal them (`shared.cleanup.sessions`)",
    group=BUS,
    high=WEEK,
)


SAGA_RETENTION = seconds(
    "BUS_SAGA_RETENTION_SECONDS",
    float(WEEK),
    "how long a completed saga instance's marker is kept: until then every message for it, a "
    "starting one too, is saga_not_found (`shared.cleanup.saga_markers`)",
    group=BUS,
)


def _switch(text: str) -> bool:
    if text.lower() in ("on", "off"):
        return text.lower() == "on"
    raise ValueError(text)


INGRESS_KEY_SCOPES = Setting(
    "BUS_INGRESS_KEY_SCOPES",
    False,
    "off or on",
    "on: each sender's idempotency keys are its own (records at `scope|key`; a raw-key record "
    "written before the switch still answers the sender kind that wrote it). off (the default "
    "in this version, so instances of the previous version and of this one answer each other "
    "during the deploy): records stay at the raw key, one namespace for every sender, but a "
    "key reused for a different message is refused when its record has a fingerprint. Set on "
    "once every instance runs this version (docs/deploy.md)",
    BUS,
    _switch,
    "off",
)
WIRE_FORMAT = whole(
    "BUS_WIRE_FORMAT",
    2,
    "the format version this instance writes on every envelope, signal, token, outbox record, "
    "ingress record and poison wrapper (`shared.bus.formats`); it reads 1 and 2 whatever this "
    "says. 1 writes exactly what a release before format versions wrote and reads: set it while "
    "instances of such a release still run, then remove it (docs/deploy.md)",
    group=BUS,
    low=1,
    high=2,
)
INGRESS_ENTRA_CALLERS = flag(
    "BUS_INGRESS_ENTRA_CALLERS",
    "the HTTP routes sit behind App Service authentication with Microsoft Entra ID "
    "(`entraAuthEnabled`, which sets this): each caller's Idempotency-Keys are its own, scoped "
    "by the object id the platform sends in X-MS-CLIENT-PRINCIPAL-ID. Start-up stops when "
    "App Service authentication is off (WEBSITE_AUTH_ENABLED), and a request not signed in "
    "with Entra ID (X-MS-CLIENT-PRINCIPAL-IDP `aad`) is 401",
    group=BUS,
)
AUTO_SUBSCRIBE = flag(
    "BUS_AUTO_SUBSCRIBE",
    "on the app's first invocation in a process, subscribe every endpoint to the topics of the "
    "events it handles, as `bus subscribe --all` does (a failure is logged and retried on a later "
    "invocation). Turn it off to keep an endpoint unsubscribed on purpose: with it on, the next "
    "start subscribes it again (docs/deploy.md)",
    group=BUS,
    default=True,
)
PROCESSED_RETENTION = seconds(
    "BUS_PROCESSED_RETENTION_SECONDS",
    float(WEEK),
    "processed_messages mode: how long a processed-message row deduplicates copies of its "
    "message; the cleanup removes older rows (docs/modes.md)",
    group=BUS,
)
STATE_STREAM_RETENTION = seconds(
    "BUS_STATE_STREAM_RETENTION_SECONDS",
    float(WEEK),
    "state_based mode: how long a duplicate can still be replayed against the version before "
    "it; the cleanup removes older versions, never the latest",
    group=BUS,
)
ENTITY_OUTBOX_RETENTION = seconds(
    "BUS_ENTITY_OUTBOX_RETENTION_SECONDS",
    float(WEEK),
    "entity_outbox mode: how long a dispatched entry stays in the entity's outbox map to "
    "deduplicate copies",
    group=BUS,
)
GIVE_BACK = seconds(
    "BUS_GIVE_BACK_SECONDS",
    3600.0,
    "how long a message written by a newer version of the app (a message type, type version "
    "or format this instance does not know) is given back for an upgraded instance, with "
    "growing delays, before it is parked; longer than a rolling deploy, 0 parks it at once "
    "(docs/retries.md)",
    group=BUS,
    open_low=False,
    high=float(DAY),
)
MIB = 1024 * 1024
MAX_PAYLOAD_CEILING = 100 * MIB
"""Azure Functions' own HTTP request limit (100 MB): a larger body could not reach the HTTP
ingress at all. A body travels in its token blob, never in a queue message, so storage sets
no lower bound; the memory a worker needs (a small multiple of the body) is the real cost."""
MAX_PAYLOAD = whole(
    "BUS_MAX_PAYLOAD_BYTES",
    16 * MIB,
    "largest serialised message body sent, at the ingress (413), by `bus send` and `bus "
    "publish` (exit code 2), by a handler (MessageTooLarge: the incoming message is parked) "
    "and by the bulk job (a rejected row); bodies travel in token blobs, so the ceiling is the "
    "Functions host's 100 MB request limit, and a worker holds a few copies of a body at once",
    group=BUS,
    low=1,
    high=MAX_PAYLOAD_CEILING,
)
BODY_BUDGET = whole(
    "BUS_BODY_BUDGET_BYTES",
    0,
    "bytes of message bodies one worker holds at once, counted before a body is downloaded "
    "or parsed (a receiver's token and shared payload, an HTTP request) and released when its "
    "invocation ends; 0: four bodies of BUS_MAX_PAYLOAD_BYTES. At least BUS_MAX_PAYLOAD_BYTES. "
    "A worker holds a few times this in memory (docs/benchmarks.md, working set)",
    group=BUS,
    low=0,
    high=64 * 1024 * MIB,
)
BODY_BUDGET_WAIT = seconds(
    "BUS_BODY_BUDGET_WAIT_SECONDS",
    10.0,
    "how long a receiver waits for room in BUS_BODY_BUDGET_BYTES before it gives its message "
    "back to the queue, hidden for as long (not a failure: no try is counted, nothing is "
    "parked)",
    group=BUS,
    open_low=False,
    high=300.0,
)
STATE_WAIT = seconds(
    "BUS_STATE_WAIT_MAX_SECONDS",
    300.0,
    "longest a message waits, hidden in its queue, while the app's state store (its state "
    "account or PostgreSQL) does not answer; the waits grow from 5 s (or this, if shorter) "
    "to this cap, with jitter, and spend none of the message's tries, so an outage of any "
    "length parks nothing (docs/retries.md)",
    group=BUS,
    low=1.0,
    open_low=False,
    high=float(DAY),
)
HTTP_CONCURRENCY = whole(
    "BUS_HTTP_CONCURRENCY",
    16,
    "most `POST /api/messages` and app web route requests one instance works on at once; "
    "beyond it, and when BUS_BODY_BUDGET_BYTES has no room for a request's body, the answer "
    "is 503 with Retry-After",
    group=BUS,
    low=1,
    high=1000,
)
SHARED_PAYLOAD_MIN_CHARS = whole(
    "BUS_SHARED_PAYLOAD_MIN_CHARS",
    8192,
    "a message for two or more destinations whose envelope is longer than this many "
    "characters stores its body once, in the payloads container, and its tokens refer to it; "
    "shorter envelopes travel inside their signals, where sharing would add a read "
    "(docs/benchmarks.md, shared payloads)",
    group=BUS,
    low=8192,
    high=2**31 - 1,
)
MAX_OUTPUTS = whole(
    "BUS_MAX_OUTPUTS",
    100,
    "most messages one handler run may send or publish, counted as sent: an event counts "
    "once, however many endpoints subscribe to it (`BUS_MAX_DELIVERIES` bounds those)",
    group=BUS,
    low=1,
    high=MAX_DELIVERIES_CEILING,
)
MAX_DELIVERIES = whole(
    "BUS_MAX_DELIVERIES",
    MAX_DELIVERIES_CEILING,
    "most deliveries one incoming message or HTTP send may cause once events are expanded to "
    "their subscribers; its outbox record lists each delivery's signal and must also fit "
    "Table Storage's 1 MiB entity (a larger list is refused before anything is sent)",
    group=BUS,
    low=1,
    high=MAX_DELIVERIES_CEILING,
)
SEND_CONCURRENCY = whole(
    "BUS_SEND_CONCURRENCY",
    16,
    "most token creations, and then most signal sends, one handler run or HTTP send has in "
    "flight at once; a publish to many subscribers takes about deliveries / this many request "
    "times instead of one per delivery (docs/benchmarks.md)",
    group=BUS,
    low=1,
    high=256,
)
MAX_CONFLICT_ROUNDS = whole(
    "BUS_MAX_CONFLICT_ROUNDS",
    12,
    "optimistic-concurrency retries inside one invocation before the message is given back to "
    "the queue",
    group=BUS,
    low=1,
    high=100,
)

POSTGRES_URL = text(
    "BUS_POSTGRES_URL",
    None,
    "a libpq URL, postgresql://user@host:port/database",
    'the database of `store="postgres"` endpoints; required when the app has such endpoints '
    "(docs/postgres.md)",
    group=POSTGRES,
)
POSTGRES_ENDPOINT_URL = text(
    "BUS_POSTGRES_URL_<ENDPOINT>",
    None,
    "a libpq URL",
    "one endpoint's own database (the endpoint's name upper-cased, other characters as _)",
    group=POSTGRES,
)
POSTGRES_POOL_SIZE = whole(
    "BUS_POSTGRES_POOL_SIZE",
    10,
    "pooled connections per database and process; a message holds one from before its "
    "handler runs to its commit",
    group=POSTGRES,
    low=1,
    high=1000,
)
POSTGRES_ENTRA = flag(
    "BUS_POSTGRES_ENTRA",
    "sign in to Azure Database for PostgreSQL with a Microsoft Entra token (azure-identity, "
    "fetched per new connection) instead of a password",
    group=POSTGRES,
)

COSMOS_ENDPOINT = text(
    "BUS_COSMOS_ENDPOINT",
    None,
    "the account's https:// URL, https://<account>.documents.azure.com:443/",
    'the Cosmos DB account of `store="cosmos"` endpoints; required when the app has such '
    "endpoints. A loopback address (the local server) is reached without checking its "
    "self-signed certificate (docs/stores.md)",
    group=COSMOS,
)
COSMOS_KEY = text(
    "BUS_COSMOS_KEY",
    None,
    "the account key (base64)",
    "sign in with the account key (the local server, key auth; a Key Vault reference is "
    "resolved by the platform first); unset: with the app's identity (azure-identity), which "
    "needs a Cosmos DB data role on the account. Never logged or shown",
    group=COSMOS,
)
COSMOS_DATABASE = text(
    "BUS_COSMOS_DATABASE",
    "bus",
    "a Cosmos DB database name (no /, \\, # or ?)",
    "the database holding a container per cosmos endpoint, named as the endpoint "
    "(`bus provision` creates both)",
    group=COSMOS,
)

SERVICE_URL = text(
    "BUS_SERVICE_<NAME>_URL",
    None,
    "an https:// base address with a host and no user, query or fragment (http:// only to "
    "localhost, 127.0.0.1 or ::1: a credential and bodies must not cross a network in clear)",
    "where the service the app declares as `app.service(name, ...)` lives (NAME: its name "
    "upper-cased, '-' as '_'); each operation's path is appended. Required for every declared "
    "service (docs/effects.md)",
    group=EFFECTS,
)
SERVICE_CREDENTIAL = text(
    "BUS_SERVICE_<NAME>_CREDENTIAL",
    None,
    "a token, or a Key Vault reference `@Microsoft.KeyVault(SecretUri=...)` that the "
    "platform resolves",
    "sent as `Authorization: Bearer <credential>` on every call to that service; never "
    "logged or shown. A reference the platform could not resolve stops start-up",
    group=EFFECTS,
)
EFFECT_ANSWER_MAX_BYTES = whole(
    "BUS_EFFECT_ANSWER_MAX_BYTES",
    65536,
    "largest answer body read from a service; a larger answer is not read further and "
    "counts as unusable (retried with the same key)",
    group=EFFECTS,
    low=2,
    high=MAX_PAYLOAD_CEILING,
)
MAX_DELAYED_RETRIES = 100
"""The most delayed retries a retry policy holds (``shared.bus.retries``), and so the largest
retry number a signal may carry; here so that settings of retries can be bounded by it."""

EFFECT_RETRIES = whole(
    "BUS_EFFECT_RETRIES",
    8,
    "how many delayed retries (10 s, tripling, at most an hour apart) the performer makes of a "
    "call, with the same idempotency key, after one whose outcome is unknown (a timeout, a "
    "dropped connection, 429, 5xx, an unusable answer); the default spans about three hours. "
    "After the last one the request is parked, and `bus replay` calls again with the same key",
    group=EFFECTS,
    low=0,
    high=MAX_DELAYED_RETRIES,
)

CLEANUP_SCHEDULE = text(
    "CLEANUP_SCHEDULE",
    None,
    "an NCRONTAB schedule, six fields, seconds first, UTC (the template and "
    "local.settings.sample.json set `0 */5 * * * *`)",
    "schedule of the `cleanup` timer function, read by the Functions host; without it the "
    "host does not index that function",
    group=CLEANUP,
)
CLEANUP_GRACE = seconds(
    "CLEANUP_GRACE_SECONDS",
    600.0,
    "age after which an uncommitted token is abandoned; keep it above the function timeout "
    "plus a few minutes (docs/cleanup.md)",
    group=CLEANUP,
    open_low=False,
)
CLEANUP_BUDGET = seconds(
    "CLEANUP_BUDGET_SECONDS",
    240.0,
    "a cleanup run stops starting pages after this long",
    group=CLEANUP,
    open_low=False,
)
CLEANUP_PAGE_SIZE = whole(
    "CLEANUP_PAGE_SIZE", 200, "rows or blobs per page", group=CLEANUP, low=1, high=1000
)
CLEANUP_CONCURRENCY = whole(
    "CLEANUP_CONCURRENCY", 32, "records judged at once across a pass", group=CLEANUP, low=1, high=64
)
DISCARD_RETENTION = seconds(
    "BUS_DISCARD_RETENTION_SECONDS",
    float(90 * DAY),
    "how long a poison message an operator discarded (`bus poison discard`) is kept in the "
    "`discarded` container, with who discarded it, when and why (docs/console.md)",
    group=BUS,
    open_low=False,
    low=DAY,
)
CLEANUP_LEASE = seconds(
    "CLEANUP_LEASE_SECONDS",
    30.0,
    "lease on a cleanup task, renewed by a heartbeat every third of it",
    group=CLEANUP,
    low=1.0,
    open_low=False,
)
CLEANUP_AUDIT_RETENTION = seconds(
    "CLEANUP_AUDIT_RETENTION_SECONDS",
    30.0 * DAY,
    "audit rows older than this are removed (export them first to keep them)",
    group=CLEANUP,
    open_low=False,
)
CLEANUP_POISON_EXPIRY_MARGIN = seconds(
    "CLEANUP_POISON_EXPIRY_MARGIN_SECONDS",
    6.0 * DAY,
    "a poison message with less than this left before it expires (the Functions host moves "
    "them with 7 days) is re-parked with no expiry",
    group=CLEANUP,
    low=3600.0,
    open_low=False,
)

CLEANUP_BACKLOG_MAX_TOKENS = whole(
    "CLEANUP_BACKLOG_MAX_TOKENS",
    20000,
    "tokens in flight a cleanup pass counts at its end for the alerts (`bus.tokens.*`, "
    "docs/alerts.md), 5,000 a request; past it the counts and the oldest age are lower "
    "bounds; 0 counts none",
    group=CLEANUP,
    low=0,
    high=100000,
)
CONSOLE_ENABLED = flag(
    "BUS_CONSOLE_ENABLED",
    "serve the operator console from the deployed app, as the HTTP function `console` (route "
    "`console/{*path}`, guarded by the console's own credential, not a function key: "
    "BUS_CONSOLE_SECRET or an Entra ID sign-in; docs/console.md). `bus console` serves it on an "
    "operator's machine whatever this says",
    group=CONSOLE,
)
CONSOLE_READ_ONLY = flag(
    "BUS_CONSOLE_READ_ONLY",
    "the console shows everything and changes nothing: every replay and discard is refused "
    "(`bus console --read-only` too)",
    group=CONSOLE,
)
CONSOLE_IDENTITIES = ("secret", "entra")


def _identity(text: str) -> str:
    if text.lower() not in CONSOLE_IDENTITIES:
        raise ValueError(text)
    return text.lower()


CONSOLE_IDENTITY = Setting(
    "BUS_CONSOLE_IDENTITY",
    "secret",
    "secret or entra",
    "how the deployed console knows its operator (never by a function key, which every host "
    'key stands in for): `secret`, BUS_CONSOLE_SECRET (who acted is "console secret"); '
    "`entra`, the Entra ID sign-in of App Service authentication, which must be on "
    "(WEBSITE_AUTH_ENABLED; who acted is the signed-in name and object id; with "
    "BUS_CONSOLE_SECRET set too, both are required). With the console enabled and neither, "
    "start-up stops",
    CONSOLE,
    _identity,
    "secret",
)
CONSOLE_SECRET_MIN_CHARS = 32
CONSOLE_SECRET = text(
    "BUS_CONSOLE_SECRET",
    None,
    f"at least {CONSOLE_SECRET_MIN_CHARS} characters (`openssl rand -base64 32`), or a Key "
    "Vault reference `@Microsoft.KeyVault(SecretUri=...)` that the platform resolves",
    "the deployed console's own secret: the operator types it into the console's sign-in "
    "and the page sends it in X-Console-Secret, compared in constant time; give it to no "
    "ingress client. Never logged or shown; a reference the platform could not resolve "
    "stops start-up",
    group=CONSOLE,
)
CONSOLE_AUDIT_SCAN_ROWS = whole(
    "BUS_CONSOLE_AUDIT_SCAN_ROWS",
    20000,
    "audit rows the console's overview reads per endpoint for its throughput and latency of "
    "the last minutes, session records per endpoint that takes transactional sessions, and "
    "a saga's instances and as many of its audit rows again, for its counts (beyond it the "
    "figures say they are partial; docs/console.md)",
    group=CONSOLE,
    low=100,
    high=1_000_000,
)
CONSOLE_LIST_LIMIT = whole(
    "BUS_CONSOLE_LIST_LIMIT",
    1000,
    "parked messages one pass reads per poison queue, listing, replaying or discarding, in "
    "the console and in `bus poison list`, `bus replay` and `bus poison discard` (beyond it "
    "the pass says it is incomplete: `complete` false; docs/console.md)",
    group=CONSOLE,
    low=32,
    high=100_000,
)

AUTH_ENABLED = flag(
    "WEBSITE_AUTH_ENABLED",
    "set by Azure when App Service authentication is on (never by hand): only then are the "
    "X-MS-CLIENT-PRINCIPAL-* headers the platform's, so BUS_CONSOLE_IDENTITY=entra and "
    "BUS_INGRESS_ENTRA_CALLERS stop start-up without it",
    group=PLATFORM,
)
AUTH_DEFAULT_PROVIDER = text(
    "WEBSITE_AUTH_DEFAULT_PROVIDER",
    None,
    "an identity provider's name (AzureActiveDirectory for Microsoft Entra ID)",
    "set by Azure with App Service authentication: the provider a browser is sent to sign "
    "in with; each request's provider is its X-MS-CLIENT-PRINCIPAL-IDP header (`aad` is the "
    "only one believed)",
    group=PLATFORM,
)

SETTINGS: tuple[Setting[Any], ...] = (
    BUS_APP,
    APP_NAME,
    STORAGE_SETTING,
    STATE_STORAGE_SETTING,
    CONNECTION,
    CONNECT_TIMEOUT,
    READ_TIMEOUT,
    CALL_TIMEOUT,
    INGRESS_TIMEOUT,
    INGRESS_WINDOW,
    SESSION_RESEND,
    SAGA_RETENTION,
    INGRESS_KEY_SCOPES,
    WIRE_FORMAT,
    INGRESS_ENTRA_CALLERS,
    AUTO_SUBSCRIBE,
    PROCESSED_RETENTION,
    STATE_STREAM_RETENTION,
    ENTITY_OUTBOX_RETENTION,
    DISCARD_RETENTION,
    GIVE_BACK,
    MAX_PAYLOAD,
    BODY_BUDGET,
    BODY_BUDGET_WAIT,
    STATE_WAIT,
    HTTP_CONCURRENCY,
    SHARED_PAYLOAD_MIN_CHARS,
    MAX_OUTPUTS,
    MAX_DELIVERIES,
    SEND_CONCURRENCY,
    MAX_CONFLICT_ROUNDS,
    POSTGRES_URL,
    POSTGRES_ENDPOINT_URL,
    POSTGRES_POOL_SIZE,
    POSTGRES_ENTRA,
    COSMOS_ENDPOINT,
    COSMOS_KEY,
    COSMOS_DATABASE,
    SERVICE_URL,
    SERVICE_CREDENTIAL,
    EFFECT_ANSWER_MAX_BYTES,
    EFFECT_RETRIES,
    CLEANUP_SCHEDULE,
    CLEANUP_GRACE,
    CLEANUP_BUDGET,
    CLEANUP_PAGE_SIZE,
    CLEANUP_CONCURRENCY,
    CLEANUP_LEASE,
    CLEANUP_AUDIT_RETENTION,
    CLEANUP_POISON_EXPIRY_MARGIN,
    CLEANUP_BACKLOG_MAX_TOKENS,
    CONSOLE_ENABLED,
    CONSOLE_READ_ONLY,
    CONSOLE_IDENTITY,
    CONSOLE_SECRET,
    CONSOLE_AUDIT_SCAN_ROWS,
    CONSOLE_LIST_LIMIT,
    AUTH_ENABLED,
    AUTH_DEFAULT_PROVIDER,
)
"""Every app setting, in the order of the docs' table."""


def _cell(value: str) -> str:
    return value.replace("|", "\\|")


def markdown_table() -> str:
    """The table of docs/settings.md, generated from ``SETTINGS``."""
    lines = [
        "| Setting | Default | Accepts | What it does |",
        "| --- | --- | --- | --- |",
    ]
    group = None
    for setting in SETTINGS:
        if setting.group != group:
            group = setting.group
            lines.append(f"| **{group}** | | | |")
        lines.append(
            f"| `{setting.name}` | {_cell(setting.shown_default)} | {_cell(setting.accepts)} | "
            f"{_cell(setting.description)} |"
        )
    return "\n".join(lines) + "\n"
