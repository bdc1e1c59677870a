"""The audit's checks, each a pure function from DataFrames to a DataFrame.

Inputs have the columns of ``shared.audit.rows``: ``audit`` (one row per processing, written
in the same transaction as its state change) and ``ingress`` (one row per client send).

A *delivery* is one message to one destination, identified by ``(destination, message_id)``:
a published event has a separate message id per subscriber (uuid5 of the incoming id, the
output's index and the destination), so both parts are needed only to be safe against a
future id scheme that reuses an id across destinations; the audit never relies on ids being
globally unique.

- *sent*: every delivery in an ingress record's ``outgoing`` plus every entry of an audit row's
  ``caused`` list (what a handler sent, committed with its state change, or what a
  transactional session sent, committed with the user's writes);
- *processed*: every audit row but a session's, keyed ``(endpoint, message_id)``. A session's
  row (mode ``session``) records a commit made outside any handler: nobody sent the session,
  so it is no processing, hence never a ghost, a duplicate or a latency.

Inside one table partition the RowKey ``audit|{m}`` is unique, so a second processing of a
delivery can only show up as a second audit row elsewhere: in another partition (the message's
partition key changed), in another table (the endpoint was moved between tables or modes), or
in merged or repeated exports. That is why duplicates are counted per delivery key across every
input row, not per stored row key.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from shared.audit.rows import DELIVERY_FIELDS
from shared.audit.schema import DELIVERIES_SCHEMA
from shared.bus.session_records import SESSION_MODE

HISTOGRAM_STEPS_PER_DOUBLING = 4
"""Latency histogram buckets grow by 2**(1/4) (about 19%): fine enough to read p50 and p99
off the plot, few enough (about 80 buckets from 1 ms to an hour) to collect."""

_NICE_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)


AUDIT_REQUIRED = ("endpoint", "message_id", "sent_at", "processed_at")
"""Audit columns a row is invalid without."""
INGRESS_REQUIRED = ("sender", "created_at")
"""Ingress columns a record is invalid without."""


def is_session(mode: Column) -> Column:
    """True for a session's audit row; false for every other row, one without a mode too."""
    return mode.eqNullSafe(F.lit(SESSION_MODE))


def processing_rows(audit: DataFrame) -> DataFrame:
    """The audit rows that record a processing of a delivery: all but the sessions' rows."""
    return audit.where(~is_session(F.col("mode")))


def sent_deliveries(
    audit: DataFrame, ingress: DataFrame, *, mark_invalid_rows: bool = False
) -> DataFrame:
    """One row per delivery sent: ``sender, destination, message_id, message_type, sent_at,
    origin`` (``client`` for ingress sends, ``handler`` for messages a handler sent,
    ``session`` for those a transactional session sent: its sender is its endpoint) and
    ``incoming_id``, the message whose processing (or the client send, or the session) sent
    it: the second segment of its token's name. A message sent twice (its sender was
    processed twice) appears twice. ``caused`` and ``outgoing`` are typed lists already
    (``shared.audit.schema.DELIVERIES_SCHEMA``): nothing is parsed.

    With ``mark_invalid_rows``, every invalid row (``row_problems``) adds one more row, with
    no destination, id or type and ``invalid_row`` true (false on every real delivery):
    ``reconcile`` counts those rows as ``invalid_rows`` and as nothing else. The rows are
    checked in the scan that reads their lists anyway, instead of in one of their own."""
    by_handlers = audit.select(
        F.col("endpoint").alias("sender"),
        F.col("message_id").alias("incoming_id"),
        F.col("processed_at").alias("sent_at"),
        *_entries("caused", AUDIT_REQUIRED, mark_invalid_rows),
        F.when(is_session(F.col("mode")), F.lit("session")).otherwise("handler").alias("origin"),
    )
    by_clients = ingress.select(
        F.col("sender"),
        F.col("incoming_id"),
        F.col("created_at").alias("sent_at"),
        *_entries("outgoing", INGRESS_REQUIRED, mark_invalid_rows),
        F.lit("client").alias("origin"),
    )
    # The mark is the entry past the list's real ones (``_entries``).
    mark = (
        [(F.col("position") >= F.col("listed")).alias("invalid_row")] if mark_invalid_rows else []
    )
    return by_handlers.unionByName(by_clients).select(
        "sender",
        F.col("m.destination").alias("destination"),
        F.col("m.id").alias("message_id"),
        F.col("m.type").alias("message_type"),
        "sent_at",
        "origin",
        "incoming_id",
        *mark,
    )


def _entries(deliveries: str, required: tuple[str, ...], mark_invalid: bool) -> list[Column]:
    """The columns that explode a row's ``deliveries`` list into ``m``. Marking invalid rows
    appends an empty entry to an invalid row's list (an absent list counts as empty) and
    keeps each entry's ``position`` and the real entries' count ``listed``: the marker is the
    entry at a position past them, which no stored entry can forge."""
    if not mark_invalid:
        return [F.explode(deliveries).alias("m")]
    no_delivery = F.struct(*(F.lit(None).cast("string").alias(f) for f in DELIVERY_FIELDS))
    listed = F.coalesce(F.col(deliveries), F.array().cast(DELIVERIES_SCHEMA))
    bad = is_invalid(row_problems(required, deliveries))
    marked = F.when(bad, F.concat(listed, F.array(no_delivery))).otherwise(listed)
    return [F.posexplode(marked).alias("position", "m"), F.size(listed).alias("listed")]


POISON_KEY = ("destination", "message_id", "sender", "incoming_id")
"""What a poison entry's signal must share with a delivery sent to cover it: the queue's
endpoint, and its token's message id, sender and incoming message."""
NO_SUCH_DELIVERY = (
    "its token names no delivery sent to this endpoint (no send of this message id by the "
    "sender and incoming message its token names)"
)
NO_SIGNAL = "no signal read (an export from before poison entries were verified)"


def verify_poisoned(sent: DataFrame, poisoned: DataFrame) -> DataFrame:
    """The poison entries (``shared.audit.schema.POISONED_SCHEMA``, marker rows left out),
    each with ``problem`` final: an entry whose signal checked out (``problem`` null) but
    whose token names no delivery actually sent to its queue's endpoint, by that sender
    while processing that incoming message, gets ``NO_SUCH_DELIVERY``. Only entries left
    with ``problem`` null may cover a delivery. The entries are few (the reader's cap), so
    they are broadcast to the scan of the sends; no shuffle of the sends."""
    entries = poisoned.where(F.col("unread").isNull()).withColumnRenamed("endpoint", "destination")
    candidates = entries.where(F.col("problem").isNull()).select(*POISON_KEY).distinct()
    matched = (
        sent.select(*POISON_KEY)
        .join(F.broadcast(candidates), list(POISON_KEY), "left_semi")
        .distinct()
        .withColumn("matched", F.lit(True))
    )
    unsigned = F.exists(F.array(*[F.col(c) for c in POISON_KEY[1:]]), lambda value: value.isNull())
    problem = F.coalesce(
        F.col("problem"),
        F.when(unsigned, F.lit(NO_SIGNAL)),
        F.when(F.col("matched").isNull(), F.lit(NO_SUCH_DELIVERY)),
    )
    return entries.join(matched, list(POISON_KEY), "left").select(
        "queue",
        F.col("destination").alias("endpoint"),
        "message_id",
        "message_type",
        "reason",
        "sender",
        "incoming_id",
        "claimed_id",
        problem.alias("problem"),
    )


def processed_deliveries(audit: DataFrame) -> DataFrame:
    """One row per delivery processed at least once: ``endpoint, message_id, processings``,
    the sender and type the envelope named, and the first and last processing times."""
    return (
        processing_rows(audit)
        .groupBy("endpoint", "message_id")
        .agg(
            F.count(F.lit(1)).alias("processings"),
            F.min("source").alias("source"),
            F.min("message_type").alias("message_type"),
            F.min("processed_at").alias("first_processed_at"),
            F.max("processed_at").alias("last_processed_at"),
        )
    )


def duplicate_processings(audit: DataFrame) -> DataFrame:
    """Deliveries with more than one audit row (NoDuplicatedProcessing: must be empty), with
    the tables and partitions their rows came from."""
    return (
        processing_rows(audit)
        .groupBy("endpoint", "message_id")
        .agg(
            F.count(F.lit(1)).alias("processings"),
            F.sort_array(F.collect_set(F.concat_ws("/", "table", "partition_key"))).alias(
                "locations"
            ),
            F.sort_array(F.collect_list("mode")).alias("modes"),
            F.min("processed_at").alias("first_processed_at"),
            F.max("processed_at").alias("last_processed_at"),
        )
        .where(F.col("processings") > 1)
    )


def edge_code(sender: Column, message_type: Column) -> Column:
    """A 64-bit code for a flow edge's sender and message type. The reconciliation carries
    codes instead of strings: Spark aggregates fixed-width values in a hash table, whereas a
    string-valued aggregate (min, first) forces a sort of every row."""
    return F.xxhash64(sender, message_type)


_PROCESSING, _SEND, _PARKED, _INVALID_ROW = 0, 1, 2, 3
"""What a row of the reconciliation's shuffle is: one column instead of a flag per kind."""


def reconcile(
    sent: DataFrame,
    audit: DataFrame,
    *,
    as_of: datetime,
    lost_after: timedelta,
    poisoned: DataFrame | None = None,
) -> DataFrame:
    """Every delivery seen on either side, once, with its verdict.

    One shuffle: the sent and the processed deliveries are unioned and grouped by
    ``(destination, message_id)``. Columns: ``destination, message_id, sends, processings,
    sent_at`` (earliest send), ``first_processed_at`` and ``last_processed_at``,
    ``sent_edge`` / ``processed_edge`` (``edge_code`` of the sender and type as the sending
    side and as the audit row name them; ``latency_digest`` and ``sent_edge_names`` turn them
    back into names), and the flags ``duplicate`` (processed more than once), ``ghost``
    (processed, never sent), ``lost`` (sent before ``as_of - lost_after`` and never
    processed) and ``in_flight`` (sent since then and not processed yet: not a violation, the
    message may still be on its way), and ``poisoned`` (not processed, and waiting in a
    poison queue: ``poisoned`` has a row ``endpoint, message_id`` per verified poison entry,
    those ``verify_poisoned`` left without a problem; neither lost nor in flight, an operator
    replays it). An entry with a problem is ignored here: it cannot turn lost into poisoned.
    ``invalid_rows`` counts the marks of ``sent_deliveries(..., mark_invalid_rows=True)``
    (all under the key with neither part), which are no send.
    """
    marked = F.col("invalid_row") if "invalid_row" in sent.columns else F.lit(False)
    sends = sent.select(
        "destination",
        "message_id",
        edge_code(F.col("sender"), F.col("message_type")).alias("edge"),
        F.when(marked, _INVALID_ROW).otherwise(_SEND).alias("kind"),
        F.unix_micros("sent_at").alias("at_us"),
    )
    processed = processing_rows(audit).select(
        F.col("endpoint").alias("destination"),
        "message_id",
        edge_code(F.col("source"), F.col("message_type")).alias("edge"),
        F.lit(_PROCESSING).alias("kind"),
        F.unix_micros("processed_at").alias("at_us"),
    )
    kind = F.col("kind")
    is_send, is_processing = kind == _SEND, kind == _PROCESSING
    parked_column: list[Column] = []
    if poisoned is not None:
        verified = F.col("problem").isNull() & F.col("message_id").isNotNull()
        waiting = poisoned.where(verified).select(
            F.col("endpoint").alias("destination"),
            "message_id",
            F.lit(None).cast("long").alias("edge"),
            F.lit(_PARKED).alias("kind"),
            F.lit(None).cast("long").alias("at_us"),
        )
        processed = processed.unionByName(waiting)
        parked_column = [F.max(kind == _PARKED).alias("parked")]
    # Nearly every key is unique on each side of the shuffle (a delivery's send and its
    # processing come from different rows), so a map-side partial aggregation would hash
    # every row only to pass it on unreduced. Shuffling by the key first lets Spark plan a
    # single aggregation after the shuffle instead.
    per_delivery = (
        sends.unionByName(processed)
        .repartition("destination", "message_id")
        .groupBy("destination", "message_id")
        .agg(
            F.sum(is_send.cast("int")).alias("sends"),
            F.sum(is_processing.cast("int")).alias("processings"),
            F.sum((kind == _INVALID_ROW).cast("int")).alias("invalid_rows"),
            *parked_column,
            F.min(F.when(is_send, F.col("at_us"))).alias("sent_us"),
            F.min(F.when(is_processing, F.col("at_us"))).alias("first_processed_us"),
            F.max(F.when(is_processing, F.col("at_us"))).alias("last_processed_us"),
            F.min(F.when(is_send, F.col("edge"))).alias("sent_edge"),
            F.min(F.when(is_processing, F.col("edge"))).alias("processed_edge"),
        )
    )
    cutoff = int((as_of - lost_after).timestamp() * 1_000_000)
    processings: Column = F.col("processings")
    was_sent: Column = F.col("sends") > 0
    unprocessed: Column = was_sent & (processings == 0)
    parked: Column = F.col("parked") if parked_column else F.lit(False)
    overdue: Column = F.coalesce(F.col("sent_us") < F.lit(cutoff), F.lit(True))
    return per_delivery.select(
        "destination",
        "message_id",
        "sends",
        "processings",
        "invalid_rows",
        F.timestamp_micros("sent_us").alias("sent_at"),
        F.timestamp_micros("first_processed_us").alias("first_processed_at"),
        F.timestamp_micros("last_processed_us").alias("last_processed_at"),
        "sent_edge",
        "processed_edge",
        (processings > 1).alias("duplicate"),
        (~was_sent & (processings > 0)).alias("ghost"),
        (unprocessed & overdue & ~parked).alias("lost"),
        (unprocessed & ~overdue & ~parked).alias("in_flight"),
        (unprocessed & parked).alias("poisoned"),
    )


def sent_edge_names(sent: DataFrame, edges: list[int]) -> DataFrame:
    """Names of the given edge codes from the sent deliveries: a scan of every sent
    delivery, so it runs only for edges none of whose deliveries was processed (the
    processing rows name the others: ``latency_digest``)."""
    code = edge_code(F.col("sender"), F.col("message_type"))
    return (
        sent.where(code.isin(edges)).select(code.alias("edge"), "sender", "message_type").distinct()
    )


def named(reconciled: DataFrame, names: DataFrame) -> DataFrame:
    """The reconciliation with ``sender`` and ``message_type`` of each delivery (the sending
    side's names, or the audit row's for a ghost). For small results: samples, tests."""
    edge = F.coalesce("sent_edge", "processed_edge").alias("edge")
    return reconciled.withColumn("edge", edge).join(F.broadcast(names), "edge", "left")


def lost_messages(
    sent: DataFrame, audit: DataFrame, *, as_of: datetime, lost_after: timedelta
) -> DataFrame:
    """Deliveries sent before ``as_of - lost_after`` and never processed (NoLostMessages)."""
    return reconcile(sent, audit, as_of=as_of, lost_after=lost_after).where("lost")


def ghost_messages(sent: DataFrame, audit: DataFrame) -> DataFrame:
    """Deliveries processed that nobody sent (NoGhostMessages): no ingress record and no
    committed ``caused`` entry names them. The time threshold plays no part here."""
    far_past = datetime(1970, 1, 1, tzinfo=UTC)
    return reconcile(sent, audit, as_of=far_past, lost_after=timedelta(0)).where("ghost")


def flow_graph(reconciled: DataFrame) -> DataFrame:
    """Who sends which message types to whom: one row per ``(edge, destination)`` with how
    many deliveries were sent, processed, duplicated, lost, in flight and made up (ghosts).
    Join with the edges' names for the sender and type (``shared.audit.compute`` does).

    The same job also carries what the whole audit needs of every delivery: the marked
    ``invalid_rows`` (a row that sent and processed nothing, edge and destination null,
    holds those no delivery shares a key with) and each edge's first and last processing
    time, whose extremes are the span of all processings."""

    def count_of(flag: str) -> Column:
        return F.sum(F.col(flag).cast("long")).alias(flag)

    edge = F.coalesce("sent_edge", "processed_edge").alias("edge")
    # A poison message naming a delivery nobody sent or processed belongs to no edge; the
    # marks of invalid rows stay for their count.
    seen = (F.col("sends") > 0) | (F.col("processings") > 0) | (F.col("invalid_rows") > 0)
    return (
        reconciled.where(seen)
        .groupBy(edge, "destination")
        .agg(
            F.sum((F.col("sends") > 0).cast("long")).alias("sent"),
            F.sum((F.col("processings") > 0).cast("long")).alias("processed"),
            count_of("duplicate"),
            count_of("lost"),
            count_of("in_flight"),
            count_of("ghost"),
            count_of("poisoned"),
            F.sum("invalid_rows").alias("invalid_rows"),
            F.min("first_processed_at").alias("first_processed_at"),
            F.max("last_processed_at").alias("last_processed_at"),
        )
    )


def row_problems(required: Sequence[str], deliveries: str) -> list[Column]:
    """One column per check of a row: null when the check passes, else what is wrong (a
    required column missing, or the ``deliveries`` list unreadable where it was stored, or an
    entry of it without an id or a destination)."""
    problems = [F.when(F.col(c).isNull(), F.lit(f"{c} missing")) for c in required]
    parsed = F.col(deliveries)
    problems.append(
        F.when(
            parsed.isNull() | F.exists(parsed, lambda m: m.id.isNull() | m.destination.isNull()),
            F.lit(f"{deliveries} unreadable"),
        )
    )
    return problems


def is_invalid(problems: list[Column]) -> Column:
    """True when any of ``row_problems`` found something."""
    return F.coalesce(*problems).isNotNull()


def invalid_rows(audit: DataFrame, ingress: DataFrame) -> DataFrame:
    """Rows the audit cannot vouch for: a key or time missing, or a ``caused``/``outgoing``
    list that is not a list of deliveries. Columns: ``kind, table, partition_key, problem``."""

    def problems(df: DataFrame, kind: str, required: Sequence[str], deliveries: str) -> DataFrame:
        return df.select(
            F.lit(kind).alias("kind"),
            "table",
            "partition_key",
            F.concat_ws("; ", F.array(*row_problems(required, deliveries))).alias("problem"),
        ).where(F.col("problem") != "")

    return problems(audit, "audit", AUDIT_REQUIRED, "caused").unionByName(
        problems(
            ingress.withColumnRenamed("idempotency_key", "partition_key"),
            "ingress",
            INGRESS_REQUIRED,
            "outgoing",
        )
    )


LATENCY_STEPS_PER_DOUBLING = 256
"""The fine latency buckets the percentiles are read from grow by 2**(1/256) (0.27%): a
percentile taken as the middle of its bucket's latencies is within 0.14% of the exact one."""
_FINE_PER_HISTOGRAM_BUCKET = LATENCY_STEPS_PER_DOUBLING // HISTOGRAM_STEPS_PER_DOUBLING


def latency_code(micros: Column) -> Column:
    """The fine bucket of a latency of ``micros`` microseconds, ordered as the latencies are.
    From 1 ms up: ``floor(log2(ms) * 256)``, at least 0, whose histogram bucket is the code
    divided by 64 (``histogram_bucket_of``). Under 1 ms (negative latencies included: the
    clocks of different hosts may disagree a little): ``-1 - floor(log2(1000 - us) * 256)``,
    negative, on the same relative scale counted down from 1 ms. Null without a latency."""
    above = F.floor(F.log2(micros / 1000.0) * LATENCY_STEPS_PER_DOUBLING)
    below = -1 - F.floor(F.log2(1000 - micros) * LATENCY_STEPS_PER_DOUBLING)
    return F.when(micros >= 1000, above).otherwise(below).cast("int")


def histogram_bucket_of(code: int) -> int:
    """The histogram bucket (``HISTOGRAM_STEPS_PER_DOUBLING`` per doubling, everything under
    1 ms in bucket 0) of a ``latency_code``. Exact: scaling a logarithm by a power of two
    loses nothing, so ``floor(log2(ms) * 256) // 64 == floor(log2(ms) * 4)``."""
    return code // _FINE_PER_HISTOGRAM_BUCKET if code >= 0 else 0


def bucket_bounds(bucket: int) -> tuple[float, float]:
    lower = 0.0 if bucket == 0 else 2 ** (bucket / HISTOGRAM_STEPS_PER_DOUBLING)
    return lower, 2 ** ((bucket + 1) / HISTOGRAM_STEPS_PER_DOUBLING)


def latency_digest(audit: DataFrame, bucket_seconds: int) -> DataFrame:
    """Everything the report needs of the audit rows besides the reconciliation, in one
    scan and one job, small enough to collect. Two kinds of row, told apart by ``traffic``:

    - ``traffic`` 0: per ``endpoint`` and fine latency bucket ``code`` (``latency_code``;
      null for the rows without both times, and for sessions' rows, which are no
      processing), ``count, sum_us, min_us, max_us`` of the latencies: about 2,500 rows per
      endpoint for latencies from 1 ms to an hour. The percentiles, mean, maximum and
      histogram are read from them (``shared.audit.latency``). Every audit row is counted in
      one of them.
    - ``traffic`` 1: per ``endpoint``, ``source``, ``message_type``, their ``edge`` code
      (``edge_code``), ``bucket_start`` (the start of the row's ``bucket_seconds``
      throughput bucket; null without a processing time) and ``outcome`` (null for most
      rows), ``count``: the throughput, the outcomes, and the names of the flow's edges as
      the processing side knows them. Sessions' rows have no edge and no bucket. The code is
      computed here, beside the names, rather than by a job of its own over the few pairs:
      such a job on rows made in Python starts a Python worker (seconds, in a small audit).

    One job instead of one per figure: each scan and each job costs its own start, and a
    per-row quantile sketch (``percentile_approx``) costs more than counting into fixed
    buckets."""
    if bucket_seconds < 1:
        raise ValueError("bucket_seconds must be at least 1")
    processing = ~is_session(F.col("mode"))
    micros = F.unix_micros(F.col("processed_at")) - F.unix_micros(F.col("sent_at"))
    seconds = F.unix_seconds(F.col("processed_at"))
    start = F.timestamp_seconds(F.floor(seconds / bucket_seconds) * bucket_seconds)
    rows = audit.select(
        "endpoint",
        "source",
        "message_type",
        "outcome",
        F.when(processing, edge_code(F.col("source"), F.col("message_type"))).alias("edge"),
        F.when(processing, latency_code(micros)).alias("code"),
        F.when(processing, micros).alias("us"),
        F.when(processing, start).alias("bucket_start"),
    )
    return rows.groupingSets(
        [
            ["endpoint", "code"],
            ["endpoint", "source", "message_type", "edge", "bucket_start", "outcome"],
        ],
        "endpoint",
        "code",
        "source",
        "message_type",
        "edge",
        "bucket_start",
        "outcome",
    ).agg(
        F.grouping("code").alias("traffic"),
        F.count(F.lit(1)).alias("count"),
        F.sum("us").alias("sum_us"),
        F.min("us").alias("min_us"),
        F.max("us").alias("max_us"),
    )


def choose_bucket_seconds(span_seconds: float, max_buckets: int = 120) -> int:
    """The smallest round bucket width (1 s, 2 s, 5 s, ... 1 day) giving at most
    ``max_buckets`` buckets over the span."""
    for width in _NICE_BUCKETS:
        if span_seconds / width <= max_buckets:
            return width
    days = int(span_seconds // (86400 * max_buckets)) + 1
    return days * 86400
