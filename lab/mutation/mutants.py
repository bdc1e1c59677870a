"""The mutants: each replaces one exact piece of a protocol module (found exactly once) with
a plausible bug. ``equivalent`` names, for a mutant known not to change what the protocol
guarantees, why; such a mutant is expected to survive."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    id: str
    path: str
    original: str
    replacement: str
    bug: str
    equivalent: str = ""
    first: tuple[str, ...] = ()
    """Test files known to kill it, run before the whole test command: they only bring the
    verdict sooner (a mutant they do not kill runs the whole command, as any other)."""


MUTANTS: tuple[Mutant, ...] = (
    # -- token-mode receiver (R1-R9) ------------------------------------------------------------
    Mutant(
        "receiver-claim-without-etag",
        "shared/bus/receiver.py",
        "signal.token, claimed, etag=token.etag",
        "signal.token, claimed, etag=None",
        "R4 claims the token unconditionally instead of by compare-and-swap",
        equivalent="every copy that reaches R4 claims with the claim id of the one O(m) of its "
        "message, which outlives the token (the cleanup retires O(m) only once the token is "
        "gone), and a claim on a deleted token fails either way (404): an unconditional claim "
        "writes the id already there. small-unbounded and small-unbounded-sweep with one "
        "deviation and one fault find no violation with it. The compare-and-swap is defence "
        "in depth should O(m) ever go first",
        first=("tests/sim",),
    ),
    Mutant(
        "receiver-delete-before-send",
        "shared/bus/receiver.py",
        """        await send_signals(self.account, outbox.outgoing, hints, config=self.config)
        if signal.token != outbox.incoming_token:""",
        """        with contextlib.suppress(NotFound):  # R7, before R6
            await self.tokens.delete(signal.token)
        await send_signals(self.account, outbox.outgoing, hints, config=self.config)
        if signal.token != outbox.incoming_token:""",
        "R7 before R6: the incoming token is deleted before the outputs are signalled",
        first=("tests/sim",),
    ),
    Mutant(
        "receiver-processed-copy-given-back",
        "shared/bus/receiver.py",
        "                if token.claim and await self._resumed_unread(signal, token):",
        "                if False:",
        "an instance that cannot read a message gives back a copy of it although its O(m) is "
        "committed: with R7 the cleanup's, the token is still there, and the copy is parked "
        "once its give-back window runs out",
        first=("tests/bus/test_give_back.py",),
    ),
    Mutant(
        "receiver-other-token-kept",
        "shared/bus/receiver.py",
        "        if signal.token != outbox.incoming_token:",
        "        if False:",
        "a second token of a message already claimed for O(m) (another sender of the same id) "
        "is claimed and never deleted: the cleanup deletes only O(m)'s own",
        first=("tests/bus/test_r7_by_cleanup.py",),
    ),
    Mutant(
        "receiver-outbox-commit-without-etag",
        "shared/bus/receiver.py",
        "version = await transaction.commit(write, committed, audit)",
        # The rows' commit refuses an unguarded update, so the guard is dropped by guarding
        # with whatever version is current at the commit: a second round commits over the first.
        "version = await transaction.commit(write, replace(committed, etag=(await "
        "self.state_store.read(envelope.partition_key, envelope.id)).outbox.etag), audit)",
        "R5 commits O(m) without its ETag: a second round commits over the first",
        first=("tests/sim",),
    ),
    Mutant(
        "receiver-state-without-etag",
        "shared/bus/pipeline.py",
        "write, outcome = self._state_write(envelope, turn, state, context, stored)",
        # Guarded by whatever version is current just before the commit: a concurrent
        # message's update since this one read the state is overwritten.
        "write, outcome = self._state_write(envelope, turn, state, context, None if stored is "
        "None else __import__('dataclasses').replace(stored, version=(await "
        "self.state_store.read(envelope.partition_key, envelope.id)).state.version))",
        "R5 writes the state without its ETag (lost update between messages of a partition)",
        first=("tests/sim/test_races.py",),
    ),
    Mutant(
        "receiver-claim-mismatch-processed",
        "shared/bus/receiver.py",
        "elif token.claim != outbox.claim:",
        "elif False:",
        "a token claimed by another O(m) claim is processed instead of reported",
        first=("tests/sim",),
    ),
    Mutant(
        "receiver-unknown-commit-tokens-not-abandoned",
        "shared/bus/round_commit.py",
        "abandoned.extend(o.token for o in created.committed_candidates)\n        raise",
        "raise",
        "after a commit with an unknown outcome, its tokens are not recorded as abandoned",
        equivalent="the cleanup reads O(m)'s abandoned list only to choose whether to list "
        "the message's sender-scoped token prefix when O(m) committed no output; listed or "
        "not, every token is judged by its origin row (an O(m) gone proves it was never "
        "committed), so tokens of a round that did not commit are removed after the grace "
        "period either way",
        first=("tests/bus/test_round_commit.py",),
    ),
    Mutant(
        "receiver-conflict-tokens-kept",
        "shared/bus/round_commit.py",
        """        await discard_tokens(tokens, created.committed_candidates)
        raise Conflict from e""",
        """        raise Conflict from e""",
        "a round that lost the commit race leaves its tokens for the cleanup",
        equivalent="the tokens are unclaimed and uncommitted: the cleanup removes them after "
        "the grace period (they are never signalled); only how long they stay changes",
        first=("tests/bus/test_round_commit.py",),
    ),
    # -- outgoing dispatch --------------------------------------------------------------------
    Mutant(
        "outgoing-attempt-id-reused",
        "shared/bus/outgoing.py",
        """    for _ in range(config.max_create_attempts):
        attempt_id = config.new_id()""",
        """    attempt_id = config.new_id()
    for _ in range(config.max_create_attempts):""",
        "a create with an unknown outcome is retried under the same attempt id",
        first=("tests/sim",),
    ),
    Mutant(
        "outgoing-unknown-create-committed",
        "shared/bus/outgoing.py",
        """        except (OutcomeUnknown, AlreadyExists):
            abandoned.append(name)
            continue""",
        """        except (OutcomeUnknown, AlreadyExists):
            etag = ""
            abandoned.append(name)""",
        "a token whose create had an unknown outcome is committed and signalled",
        first=("tests/sim",),
    ),
    # -- messages that evolve (issue 29) --------------------------------------------------------
    Mutant(
        "reading-newer-version-read",
        "shared/bus/reading.py",
        "    if type_version > model.version:",
        "    if type_version > model.version and False:",
        "a body of a newer type version is read by the older model instead of waiting for an "
        "upgraded instance (its new fields dropped)",
        first=("tests/bus/test_evolution.py",),
    ),
    Mutant(
        "reading-upcast-step-skipped",
        "shared/bus/reading.py",
        "        for newer in reversed(chain[:-1]):",
        "        for newer in reversed(chain[:-2]):",
        "an old body is upcast one version short of the receiver's model",
        first=("tests/bus/test_evolution.py",),
    ),
    Mutant(
        "reading-strict-ignored",
        "shared/bus/reading.py",
        """    if unknown and not getattr(oldest, "strict_reading", False):""",
        "    if unknown:",
        "a strictly read type drops unknown fields like any other",
        first=("tests/bus/test_evolution.py",),
    ),
    Mutant(
        "publish-former-topics-ignored",
        "shared/bus/outgoing.py",
        "    for topic in topics_of(type(event)):",
        "    for topic in (event.topic(),):",
        "a renamed event is published to its topic only: endpoints subscribed under its former "
        "topic by the previous version miss it",
        first=("tests/bus/test_evolution.py",),
    ),
    Mutant(
        "subscriptions-former-topics-ignored",
        "shared/bus/app.py",
        "        return sorted({topic for model in events for topic in topics_of(model)})",
        "        return sorted({model.topic() for model in events})",
        "a renamed event's handlers subscribe to its topic only: publishers of the previous "
        "version, which publish under the former topic, miss them",
        first=("tests/bus/test_evolution.py",),
    ),
    # -- client sends (ingress) -----------------------------------------------------------------
    Mutant(
        "ingress-lost-race-sends",
        "shared/bus/ingress.py",
        """        except (AlreadyExists, PreconditionFailed) as e:
            await discard_tokens(self.tokens, created.committed_candidates)
            raise Conflict from e""",
        """        except (AlreadyExists, PreconditionFailed) as e:
            pass""",
        "a send whose record insert lost the race to a concurrent send of its key still sends",
        first=("tests/sim/test_races.py",),
    ),
    Mutant(
        "ingress-unknown-insert-sends",
        "shared/bus/ingress.py",
        """        except OutcomeUnknown as e:
            raise Conflict from e  # may have landed""",
        """        except OutcomeUnknown as e:
            pass  # may have landed""",
        "a record insert with an unknown outcome is taken as committed",
        first=("tests/sim",),
    ),
    Mutant(
        "ingress-record-ignored",
        "shared/bus/ingress.py",
        """if existing is not None and _expires(existing) > now:
                if existing.get("fingerprint") is None:""",
        """if existing is not None and _expires(existing) < now:
                if existing.get("fingerprint") is None:""",
        "a retry inside the window does not find its key's record and sends anew",
        first=("tests/sim",),
    ),
    Mutant(
        "ingress-foreign-receipt",
        "shared/bus/ingress.py",
        """        if not asked.match(record):
            raise IdempotencyKeyReused(_reused(key))
""",
        "",
        "a key repeated with another message (type, destination, body, due time) is answered "
        "with the first message's receipt, and the new message is dropped",
        first=("tests/bus/test_ingress_scopes.py", "tests/bus/test_ingress_rollout.py"),
    ),
    Mutant(
        "ingress-request-fingerprint-ignored",
        "shared/bus/ingress.py",
        "        return self.request is not None and recorded == self.request\n",
        "        return False\n",
        "a client's retry whose record another version of the app wrote (its model reads the "
        "message differently) is refused as a reused key",
        first=("tests/bus/test_ingress_request_fingerprint.py",),
    ),
    Mutant(
        "ingress-request-fingerprint-any",
        "shared/bus/ingress.py",
        "        return self.request is not None and recorded == self.request\n",
        "        return self.request is not None\n",
        "a key reused for a different client request is answered with the first receipt",
        first=("tests/bus/test_ingress_request_fingerprint.py",),
    ),
    Mutant(
        "ingress-one-namespace",
        "shared/bus/ingress.py",
        'return f"{check_scope(scope)}{SCOPE_SEPARATOR}{key}"',
        "return key if check_scope(scope) else key",
        "every sender's records share one namespace: a key one sender took first answers, or "
        "refuses, another sender's message",
        first=("tests/bus/test_ingress_scopes.py", "tests/bus/test_ingress_rollout.py"),
    ),
    Mutant(
        "ingress-scoped-while-off",
        "shared/bus/ingress.py",
        "            partition = key\n",
        "            partition = record_key(self.scope, key)\n",
        "with BUS_INGRESS_KEY_SCOPES off the record goes under the scoped key, where instances "
        "of the previous version do not look: a retry they answer during a deploy is sent again",
        first=("tests/bus/test_ingress_scopes.py", "tests/bus/test_ingress_rollout.py"),
    ),
    Mutant(
        "ingress-legacy-any-sender",
        "shared/bus/ingress.py",
        'if record.get("sender") != sender or record.get("type") not in names:',
        'if record.get("type") not in names:',
        "a record of the previous version answers a sender of another kind than the one that "
        "wrote it (an HTTP caller's record answers `bus send`)",
        first=("tests/bus/test_ingress_scopes.py", "tests/bus/test_ingress_rollout.py"),
    ),
    # -- trust edge: the console's credential and the platform's principal headers ------------
    Mutant(
        "platform-headers-without-auth",
        "shared/platform_identity.py",
        """    if not platform.enabled:
        raise NotSignedIn(""",
        """    if False:
        raise NotSignedIn(""",
        "X-MS-CLIENT-PRINCIPAL-* are believed with App Service authentication off: any key "
        "holder names itself another caller (takes its idempotency keys, acts in the console "
        "under its name)",
        first=("tests/test_config.py", "tests/console/test_console_function.py"),
    ),
    Mutant(
        "platform-any-identity-provider",
        "shared/platform_identity.py",
        "    if provider != ENTRA_IDP:\n",
        "    if False:\n",
        "a caller signed in by another identity provider than Entra ID is taken as an Entra caller",
        first=("tests/test_config.py", "tests/console/test_console_function.py"),
    ),
    Mutant(
        "console-secret-unchecked",
        "shared/console/guard.py",
        "        if self.secret is not None and not _same_secret(",
        "        if False and not _same_secret(",
        "the deployed console serves every API request without its secret: whoever reaches "
        "it (an ingress client with a host key) reads parked bodies and acts",
        first=("tests/test_config.py", "tests/console/test_console_function.py"),
    ),
    Mutant(
        "console-binds-without-credential",
        "shared/console/guard.py",
        "    elif settings.identity == SECRET and settings.secret is None:\n",
        "    elif False:\n",
        "the console is bound with no credential of its own configured, open to everyone "
        "who reaches it",
        first=("tests/test_config.py", "tests/console/test_console_function.py"),
    ),
    # -- window modes -------------------------------------------------------------------------
    Mutant(
        "modes-state-without-etag",
        "shared/bus/modes/common.py",
        "return Insert(row) if existing is None else Update(row, existing.etag)",
        "return Insert(row) if existing is None else Update(row)",
        "a window mode writes the state without its ETag",
        first=("tests/sim",),
    ),
    Mutant(
        "modes-delete-before-send",
        "shared/bus/modes/common.py",
        """        await send_signals(self.account, tuple(outgoing), hints, config=self.config)
        await self._delete_incoming(signal)""",
        """        await self._delete_incoming(signal)
        await send_signals(self.account, tuple(outgoing), hints, config=self.config)""",
        "a window mode deletes the incoming token before signalling its outputs",
        first=("tests/sim",),
    ),
    Mutant(
        "modes-incoming-token-kept",
        "shared/bus/modes/common.py",
        """        await send_signals(self.account, tuple(outgoing), hints, config=self.config)
        await self._delete_incoming(signal)""",
        """        await send_signals(self.account, tuple(outgoing), hints, config=self.config)""",
        "a window-mode receiver leaves its incoming token as a token-mode one does, but no R7 "
        "of the cleanup deletes it: a token-mode sender's O(m) waits for it for ever (issue 42's "
        "pairings)",
        first=("tests/sim/test_pairings.py",),
    ),
    # -- delayed messages and retry policies ----------------------------------------------------
    Mutant(
        "pipeline-processes-early",
        "shared/bus/pipeline.py",
        "if (early := not_due(envelope.deliver_at, self.config.clock)) is not None:",
        "if (early := not_due(None, self.config.clock)) is not None:",
        "the receiver trusts the queue's delay: an early signal is processed before its time",
        first=("tests/sim/test_delays_retries.py",),
    ),
    Mutant(
        "pipeline-retry-acknowledged-unsent",
        "shared/bus/failures.py",
        "await send_hidden(self.account.queue(self.endpoint.name), again, delay)",
        "pass",
        "a delayed retry acknowledges the failed copy without sending its next signal",
        first=("tests/sim/test_delays_retries.py",),
    ),
    # -- giving back a newer version's message -------------------------------------------------
    Mutant(
        "pipeline-give-back-unsent",
        "shared/bus/failures.py",
        "await send_hidden(queue, given_back_text(signal, count + 1), step.delay)",
        "pass",
        "a give-back acknowledges the copy it holds without sending the signal again",
        first=("tests/sim/test_rolling.py", "tests/bus/test_give_back.py"),
    ),
    Mutant(
        "pipeline-give-back-window-ignored",
        "shared/bus/failures.py",
        "step = next_step(count, self.config.give_back_seconds)",
        "step = next_step(count, 0.0)",
        "a newer version's message is parked at once, whatever BUS_GIVE_BACK_SECONDS says",
        first=("tests/sim/test_rolling.py", "tests/bus/test_give_back.py"),
    ),
    Mutant(
        "pipeline-give-back-uncounted",
        "shared/bus/failures.py",
        "given_back_text(signal, count + 1)",
        "given_back_text(signal, count)",
        "a give-back does not count itself: the message is given back for ever, never parked",
        first=("tests/sim/test_rolling.py", "tests/bus/test_give_back.py"),
    ),
    Mutant(
        "pipeline-give-back-parked-with-count",
        "shared/bus/failures.py",
        "raw = afresh_text(delivery.raw, signal)",
        "raw = delivery.raw",
        "a message parked after its window keeps its count: its replay gets no window again",
        first=("tests/bus/test_give_back.py", "tests/sim"),
    ),
    Mutant(
        "receiver-newer-copy-given-back-unread",
        "shared/bus/receiver.py",
        "            return None\n        except (MalformedSignal, MessageSchemaError) as e:",
        "            raise\n        except (MalformedSignal, MessageSchemaError) as e:",
        "a hinted copy of a newer version's message is given back without reading its token: "
        "a copy of a message already processed is given back for the whole window, then parked",
        first=("tests/bus/test_give_back.py", "tests/sim"),
    ),
    Mutant(
        "giveback-delay-uncapped",
        "shared/bus/giveback.py",
        "min(FIRST_DELAY * 2 ** min(done, 16), MAX_DELAY, left)",
        "min(FIRST_DELAY * 2 ** min(done, 16), left)",
        "the give-back delays keep doubling: an upgraded instance waits up to half the window",
        first=("tests/bus/test_give_back.py", "tests/sim"),
    ),
    # -- cleanup --------------------------------------------------------------------------------
    Mutant(
        "cleanup-retire-before-r7",
        "shared/cleanup/outbox_records.py",
        """            elif await _exists(context.tokens, record.incoming_token):
                report.kept["incoming_pending"] += 1""",
        """            elif False:
                report.kept["incoming_pending"] += 1""",
        "an uncommitted O(m) is retired while its incoming token (claimed, or parked) exists",
        first=("tests/sim/test_races.py",),
    ),
    Mutant(
        "cleanup-r7-before-outputs",
        "shared/cleanup/outbox_records.py",
        "        if await clear_prefix(context, prefix, committed, report):\n"
        '            report.kept["outputs_in_flight"] += 1\n'
        "            return None\n"
        '        return "outbox_records"',
        "        if await clear_prefix(context, prefix, committed, report) < 0:\n"
        '            report.kept["outputs_in_flight"] += 1\n'
        "            return None\n"
        '        return "outbox_records"',
        "the cleanup deletes token(a) (R7) and retires O(m) before its outputs are received: "
        "a round that crashed before its signals loses them",
    ),
    Mutant(
        "cleanup-outputs-unlisted",
        "shared/cleanup/outbox_records.py",
        "    return not record.outgoing and not record.abandoned",
        "    return not record.abandoned",
        "a committed O(m) is retired without listing its prefix although it committed "
        "outputs: R7 and the retirement no longer wait for them to be received, and a round "
        "that crashed before its signals loses them",
        first=("tests/cleanup/test_cleanup_job.py", "tests/sim/test_races.py"),
    ),
    Mutant(
        "cleanup-retire-without-r7",
        "shared/cleanup/outbox_records.py",
        "gone, deleted = await delete_batched(context.tokens, [(n, ANY_ETAG) for n in names])",
        "gone, deleted = set(names), 0",
        "a committed O(m) is retired without deleting its incoming token: the claimed token "
        "stays for ever",
    ),
    Mutant(
        "cleanup-claimed-output-waited-for",
        "shared/cleanup/base.py",
        """            waiting += not blob.metadata.get("claim")""",
        """            waiting += 1""",
        "a committed output is waited for until it is gone, not merely claimed: with R7 the "
        "receiver's cleanup's, each hop of a chain keeps its sender's O(m) one pass longer",
    ),
    Mutant(
        "cleanup-no-fence",
        "shared/cleanup/abandoned_tokens.py",
        "if row is not None and kind.fence is not None:",
        "if False:",
        "an uncommitted O(m)'s tokens are deleted without fencing the row first",
        first=("tests/sim/test_races.py",),
    ),
    Mutant(
        "cleanup-claimed-token-deleted",
        "shared/cleanup/base.py",
        """        elif blob.metadata.get("claim"):
            waiting += 1  # claimed means signalled""",
        """        elif False:
            waiting += 1  # claimed means signalled""",
        "the outbox task deletes a claimed (signalled) token it did not commit",
        equivalent="under O(m)'s prefix only the committing round's tokens are ever signalled, "
        "and they are in the committed set, so a claimed token outside it exists only if "
        "someone forged a signal for an abandoned token; the receiver deduplicates that copy "
        "by message id, so deleting it loses nothing. The check is defence in depth against "
        "forged signals, which the simulator does not send",
    ),
    Mutant(
        "cleanup-young-tokens-deleted",
        "shared/cleanup/abandoned_tokens.py",
        """            if not context.is_old(since(blob)):
                report.kept["young"] += 1
                continue""",
        """            if False:
                report.kept["young"] += 1
                continue""",
        "tokens younger than the grace period are judged (and deleted) too",
        first=("tests/sim",),
    ),
    Mutant(
        "cleanup-foreign-origin-judged",
        "shared/cleanup/abandoned_tokens.py",
        "        return OTHER_APP\n",
        '        return "abandoned"\n',
        "a token or shared payload whose origin is another app's (a table that is none of this "
        "app's endpoints nor its ingress table) is judged abandoned: one app's cleanup deletes "
        "the other app's tokens in flight, on the shared messaging account",
        first=("tests/sim/test_two_apps.py", "tests/cleanup/test_two_apps.py"),
    ),
    # -- cleanup: parked messages (the poison task) -------------------------------------------
    Mutant(
        "cleanup-repark-deletes-first",
        "shared/cleanup/parked.py",
        "            form = await repark(context.account, self.endpoint, message.content, "
        "version=wire)",
        "            await poison.delete(message.id, message.pop_receipt)\n"
        "            form = await repark(context.account, self.endpoint, message.content, "
        "version=wire)",
        "an entry that will expire is deleted before its copy is sent (a crash between loses it)",
        first=("tests/sim/test_parked.py",),
    ),
    Mutant(
        "cleanup-orphans-unchecked",
        "shared/cleanup/parked.py",
        "            elif not self._complete:",
        "            elif self._complete is None:",
        "parked originals are deleted by a pass that did not hold every poison entry",
        first=("tests/sim/test_parked.py",),
    ),
    # -- discarding a parked message ----------------------------------------------------------
    Mutant(
        "discard-keeps-token",
        "shared/bus/discard.py",
        "    removed = token is not None and await remove_token(places.tokens, token)",
        "    removed = False",
        "a discard archives and deletes the poison message but leaves its token for ever (the "
        "oldest-token alert never clears; the origin record never retires)",
        first=("tests/sim/test_parked.py",),
    ),
    # -- one pass over a poison queue; a parked body downloaded --------------------------------
    Mutant(
        "parked-pass-ends-on-seen-batch",
        "shared/bus/parked_pass.py",
        "            if not batch:\n                return True\n",
        "            if not batch or all(m.id in passed.seen for m in batch):\n"
        "                return True\n",
        "a listing, replay or discard pass ends on a batch of messages it has seen (their hold "
        "ran out) and leaves every message behind them, saying it saw them all",
        first=("tests/bus/test_parked_action_passes.py", "tests/bus/test_parked_listing_bounds.py"),
    ),
    Mutant(
        "parked-body-digest-unchecked",
        "shared/bus/parked_body.py",
        "    if digest is not None and hashed != digest:",
        "    if False:",
        "a parked body is downloaded without checking the token against the digest in its name",
        first=("tests/bus/test_parked_body_stream.py",),
    ),
    Mutant(
        "parked-body-stream-unpinned",
        "shared/bus/parked_body.py",
        "            piece = await self.blobs.read_range(self.name, at, length, etag=self.etag)",
        "            current = (await self.blobs.get_properties(self.name)).etag\n"
        "            piece = await self.blobs.read_range(self.name, at, length, etag=current)",
        "a parked body is streamed from whatever the blob holds by then, not the version checked",
        first=("tests/bus/test_parked_body_stream.py",),
    ),
    # -- shared payloads (one payload per publish) ----------------------------------------------
    Mutant(
        "payloads-digest-unchecked",
        "shared/bus/payloads.py",
        "if len(data) != reference.size or envelope_digest(data) != reference.digest:",
        "if False:",
        "the receiver processes a shared payload without checking its size and SHA-256",
        first=("tests/bus/test_shared_payloads.py", "tests/sim"),
    ),
    Mutant(
        "payloads-created-once",
        "shared/bus/payloads.py",
        "        await container.upload(payload_blob(sender, incoming_id, digest), data, metadata)",
        "        from shared.errors import AlreadyExists\n\n"
        "        try:\n"
        "            await container.create(payload_blob(sender, incoming_id, digest), data, "
        "metadata)\n"
        "        except AlreadyExists:\n"
        "            pass",
        "a round writes its payload only if absent (If-None-Match): a later round that refers "
        "to it does not refresh its age or ETag",
        first=("tests/sim/test_shared_payloads.py", "tests/cleanup/test_shared_payload_cleanup.py"),
    ),
    Mutant(
        "pipeline-missing-payload-acknowledged",
        "shared/bus/failures.py",
        """            return Outcome.DUPLICATE
        raise error""",
        """            pass
        return Outcome.DUPLICATE""",
        "a missing payload is taken for a duplicate without checking that the token is gone",
        first=("tests/bus/test_shared_payloads.py", "tests/sim"),
    ),
    Mutant(
        "pipeline-payload-read-before-claim",
        "shared/bus/pipeline.py",
        "        incoming = Incoming(signal.token, envelope, model, delivery)\n",
        "        incoming = Incoming(signal.token, envelope, model, delivery)\n"
        "        await self._body(incoming)\n",
        "a shared payload is read with its token, before token mode's claim and a window "
        "mode's duplicate check: every copy of a processed message downloads the body",
        first=("tests/bus/test_payload_reads.py", "tests/sim/test_shared_payloads.py"),
    ),
    Mutant(
        "pipeline-postpone-unsent",
        "shared/bus/failures.py",
        "        await send_hidden(self.account.queue(self.endpoint.name), delivery.raw, delay)\n",
        "",
        "a message postponed for want of body budget is acknowledged without its signal being "
        "sent again: it is lost",
        first=("tests/bus/test_body_budget.py",),
    ),
    Mutant(
        "pipeline-state-wait-spends-tries",
        "shared/bus/failures.py",
        "        (StateUnreachable,),\n",
        "        (),\n",
        "a state store that does not answer is an ordinary failure: each delivery of a long "
        "outage spends one of the host's tries, and the message is parked",
        first=("tests/bus/test_failure_table.py", "tests/sim/test_state_outage.py"),
    ),
    Mutant(
        "pipeline-state-wait-unsent",
        "shared/bus/failures.py",
        "            await send_hidden(queue, delivery.raw, delay)\n",
        "            pass\n",
        "a message waiting for the state store is acknowledged without its signal being sent "
        "again: it is lost",
        first=("tests/bus/test_failure_table.py", "tests/sim/test_state_outage.py"),
    ),
    Mutant(
        "pipeline-budget-never-released",
        "shared/bus/pipeline.py",
        "            await delivery.holding.release_all()\n",
        "            pass\n",
        "a receive never gives back the body budget it took: the worker postpones everything "
        "once the budget has been used up",
        first=("tests/bus/test_body_budget.py",),
    ),
    Mutant(
        "ingress-budget-ignored",
        "shared/http_ingress.py",
        '    if not await holding.take("request", len(raw), 0.0):',
        '    if not await holding.take("request", 0, 0.0):',
        "the ingress parses every body whatever the worker's body budget holds",
        first=("tests/bus/test_body_budget.py",),
    ),
    Mutant(
        "cleanup-payload-young-removed",
        "shared/cleanup/payloads.py",
        "if not context.is_old(blob.last_modified):  # (a)",
        "if False:  # (a)",
        "payloads younger than the grace period are judged (and deleted) too",
        first=("tests/sim/test_shared_payloads.py",),
    ),
    Mutant(
        "cleanup-payload-tokens-unchecked",
        "shared/cleanup/payloads.py",
        "if (await context.tokens.list_page(prefix, page_size=1)).items:  # (b)",
        "if False:  # (b)",
        "a payload is removed while tokens under its prefix still refer to it",
        first=("tests/sim/test_shared_payloads.py",),
    ),
    Mutant(
        "cleanup-payload-unfenced",
        "shared/cleanup/payloads.py",
        "            kept = await _fence(context, *found, blob)",
        "            kept = None",
        "a payload whose O(m) is uncommitted is removed without fencing O(m) first",
        first=("tests/cleanup/test_shared_payload_cleanup.py", "tests/sim"),
    ),
    Mutant(
        "cleanup-payload-delete-unconditional",
        "shared/cleanup/payloads.py",
        "await context.payloads.delete(blob.name, etag=blob.etag)  # (d)",
        "await context.payloads.delete(blob.name)  # (d)",
        "a payload is deleted without If-Match: a round's rewrite since the judgement is lost",
        first=("tests/cleanup/test_shared_payload_cleanup.py", "tests/sim"),
    ),
    # -- effects (docs/effects.md) -------------------------------------------------------------
    Mutant(
        "effect-key-position-dropped",
        "shared/bus/effects.py",
        'return derived_id(incoming_id, "effect", position)',
        'return derived_id(incoming_id, "effect", 1)',
        "the key leaves out the effect's position: two effects of one run share a key, and "
        "the provider answers the second with the first's answer",
        first=("tests/effects/test_requests.py",),
    ),
    Mutant(
        "effect-key-incoming-dropped",
        "shared/bus/effects.py",
        'return derived_id(incoming_id, "effect", position)',
        'return derived_id("effect", "effect", position)',
        "the key leaves out the incoming message's id: the first effect of every message "
        "shares one key",
        first=("tests/effects/test_requests.py",),
    ),
    Mutant(
        "effect-key-fresh-per-call",
        "shared/effects/performer.py",
        "return await provider.call(request.operation, request.body, request.key)",
        "return await provider.call(request.operation, request.body, "
        'f"{request.key}-{id(request)}")',
        "the performer sends a key of its own on every call instead of the committed one: a "
        "retry after an unknown outcome applies the effect again",
        first=(
            "tests/effects/test_performer.py",
            "tests/effects/test_at_most_once.py",
            "tests/sim/test_effects.py",
        ),
    ),
    Mutant(
        "effect-4xx-retried",
        "shared/effects/provider.py",
        "if 400 <= answer.status < 500 and answer.status != TOO_MANY_REQUESTS:",
        "if False:",
        "a refusal for good (4xx) is taken for an unknown outcome and retried until parked",
        first=("tests/effects/test_memory_provider.py", "tests/effects/test_at_most_once.py"),
    ),
    Mutant(
        "effect-5xx-failed",
        "shared/effects/provider.py",
        'raise ProviderUnavailable(f"the provider answered {answer.status}")',
        'return "failed"',
        "a 5xx or 429 is answered failed: the bus claims a refusal for a call whose outcome "
        "it does not know",
        first=(
            "tests/effects/test_memory_provider.py",
            "tests/effects/test_performer.py",
            "tests/effects/test_at_most_once.py",
        ),
    ),
    Mutant(
        "effect-key-reused-failed",
        "shared/effects/provider.py",
        "    if answer.status in service.key_reused_statuses:",
        "    if False:",
        "a key used with another body (a declared key-reused status, 422 by default) is "
        "answered failed instead of parked as a defect",
        first=("tests/effects/test_memory_provider.py", "tests/effects/test_at_most_once.py"),
    ),
    Mutant(
        "effect-409-parked",
        "shared/effects/provider.py",
        "        raise EffectInProgress(",
        "        raise EffectKeyConflict(",
        "a provider's 'in progress' (409 by default: a call under the same key still running) "
        "is taken for a key reused with another body and parks the request, which then is "
        "never answered (issue 42)",
        first=(
            "tests/effects/test_http_performer.py",
            "tests/effects/test_memory_provider.py",
            "tests/effects/test_at_most_once.py",
            "tests/sim/test_effects.py",
        ),
    ),
    Mutant(
        "effect-request-dropped",
        "shared/bus/context.py",
        "self._add(PendingOutput(request, self._performer, {}, trace_headers()))",
        "pass",
        "the request is not an output of the requester's round: nothing is committed, "
        "nothing performed",
        first=("tests/effects/test_requests.py",),
    ),
    Mutant(
        "effect-answer-not-sent",
        "shared/effects/performer.py",
        """        ctx.send(
            answer_model(""",
        """        (lambda *_, **__: None)(
            answer_model(""",
        "the performer calls the provider but sends no answer in its commit",
        first=(
            "tests/effects/test_performer.py",
            "tests/effects/test_at_most_once.py",
            "tests/sim/test_effects.py",
        ),
    ),
    Mutant(
        "effect-marker-unconditional",
        "shared/effects/markers.py",
        """            await self.rows.insert(marker)
        except AlreadyExists:
            return False""",
        """            await self.rows.insert(marker)
        except AlreadyExists:
            return True""",
        "an at-most-once marker found already there counts as this copy's own: every copy calls",
        first=(
            "tests/contract/test_marker_contract.py",
            "tests/effects/test_at_most_once.py",
            "tests/sim/test_effects.py",
        ),
    ),
    Mutant(
        "effect-marker-after-call",
        "shared/effects/performer.py",
        """    if not await markers.mark(request.key, request_id=ctx.message_id, at=ctx.now()):
        return _uncertain(request, NO_ANSWER, "its marker was already there")
    with observed_call(request.service, request.operation, request.key) as call:
        try:
            answer = await _call(provider, request, call_timeout)
        except ProviderUnavailable as e:
            call.answered(NO_ANSWER.status, "uncertain")
            return _uncertain(request, NO_ANSWER, str(e))
""",
        """    with observed_call(request.service, request.operation, request.key) as call:
        try:
            answer = await _call(provider, request, call_timeout)
        except ProviderUnavailable as e:
            call.answered(NO_ANSWER.status, "uncertain")
            return _uncertain(request, NO_ANSWER, str(e))
        if not await markers.mark(request.key, request_id=ctx.message_id, at=ctx.now()):
            return _uncertain(request, NO_ANSWER, "its marker was already there")
""",
        "the at-most-once marker is inserted after the call: a run after a crash calls again",
        first=("tests/sim/test_effects.py",),
    ),
    Mutant(
        "effect-uncertain-retried",
        "shared/effects/performer.py",
        """        except ProviderUnavailable as e:
            call.answered(NO_ANSWER.status, "uncertain")
            return _uncertain(request, NO_ANSWER, str(e))""",
        """        except ProviderUnavailable:
            raise""",
        "an at-most-once call whose outcome is unknown raises for a retry instead of answering "
        "uncertain (the retry finds the marker, so the answer is uncertain anyway, a retry later)",
        first=("tests/effects/test_at_most_once.py",),
    ),
    Mutant(
        "cleanup-marker-request-unchecked",
        "shared/cleanup/markers.py",
        """    if pending:
        report.kept["request_pending"] += 1""",
        """    if False:
        report.kept["request_pending"] += 1""",
        "an at-most-once marker is retired while its request may still run (parked, say): "
        "its replay calls again",
        first=("tests/cleanup/test_marker_retirement.py",),
    ),
    Mutant(
        "cleanup-marker-grace-ignored",
        "shared/cleanup/markers.py",
        "if not context.is_old(since):",
        "if False:",
        "an at-most-once marker is retired on the pass after its request was seen gone, "
        "without waiting the grace period for a copy still in the handler",
        first=("tests/cleanup/test_marker_retirement.py",),
    ),
    # -- transactional sessions (S1-S6, shared/bus/session.py) and their cleanup ---------------
    Mutant(
        "session-commit-without-etag",
        "shared/bus/session.py",
        "operations = [*self._writes, Update(committed.to_entity(), record.etag)]",
        # The rows' commit refuses an unguarded update, so the guard is dropped by guarding
        # with whatever version O(s) has at the commit (as receiver-outbox-commit-without-etag).
        "operations = [*self._writes, Update(committed.to_entity(), (await self._rows.read("
        "self.partition_key, [session_row(self.session_id)]))[session_row(self.session_id)]"
        ".etag)]",
        "S4 commits O(s) without the ETag it was read at: a request commits over another "
        "request of its key",
        first=("tests/bus/test_sessions.py", "tests/sim/test_sessions.py"),
    ),
    Mutant(
        "session-signals-before-commit",
        "shared/bus/session.py",
        "        try:\n"
        "            versions = await transaction.commit(operations, self._audit(committed))",
        "        await send_signals(\n"
        "            self._account, committed.outgoing, created.hints, config=self._config\n"
        "        )\n"
        "        try:\n"
        "            versions = await transaction.commit(operations, self._audit(committed))",
        "S5 before S4: the session's signals are sent before its commit",
        first=("tests/bus/test_sessions.py", "tests/sim/test_sessions.py"),
    ),
    Mutant(
        "session-marked-before-signals",
        "shared/bus/session.py",
        "            await send_signals(self._account, committed.outgoing, hints, "
        "config=self._config)\n"
        "            signalled = replace(committed, signalled=True)\n"
        "            await self._rows.update(signalled.to_entity(), committed.etag)",
        "            signalled = replace(committed, signalled=True)\n"
        "            await self._rows.update(signalled.to_entity(), committed.etag)\n"
        "            await send_signals(self._account, committed.outgoing, hints, "
        "config=self._config)",
        "S6 before S5: O(s) is marked signalled before its signals are sent",
        first=("tests/bus/test_sessions.py", "tests/sim/test_sessions.py"),
    ),
    Mutant(
        "session-dedup-skipped",
        "shared/bus/session.py",
        """        if record.committed:
            self.deduplicated = True""",
        """        if False:
            self.deduplicated = True""",
        "S1 takes a committed O(s) for an open one: a retry under the same key writes and "
        "sends again",
        first=("tests/bus/test_sessions.py", "tests/sim/test_sessions.py"),
    ),
    Mutant(
        "cleanup-session-resend-skipped",
        "shared/cleanup/sessions.py",
        """        await send_signals(context.account, record.outgoing, config=context.config)
        # Marked""",
        """        # Marked""",
        "the sessions task marks a committed O(s) left unsignalled as signalled without "
        "sending its signals",
        first=("tests/bus/test_sessions.py", "tests/sim/test_sessions.py"),
    ),
    Mutant(
        "cleanup-session-resend-early",
        "shared/cleanup/sessions.py",
        "        if committed_at + wait > context.now:",
        "        if False:",
        "the sessions task signals a committed O(s) at once, without the resend delay that "
        "leaves its request the time to do it",
        first=("tests/bus/test_sessions.py", "tests/sim/test_sessions.py"),
    ),
    Mutant(
        "cleanup-session-open-retired-young",
        "shared/cleanup/sessions.py",
        "            if not context.is_old(record.started_at):",
        "            if False:",
        "the sessions task retires an open O(s) before the grace period: a request still in "
        "its block is fenced",
        first=("tests/bus/test_sessions.py", "tests/sim/test_sessions.py"),
    ),
    # -- sagas (issue 46, shared/bus/saga.py and the saga branch of the receiver) -------------
    Mutant(
        "saga-any-type-starts",
        "shared/bus/saga.py",
        "    if row is None and type_name in spec.started_by:",
        "    if row is None:",
        "any message for an instance that does not exist starts it, not only the started_by "
        "types: a late payment for an order never placed starts a checkout",
        first=("tests/bus/test_sagas.py", "tests/sim/test_sagas.py"),
    ),
    Mutant(
        "saga-marker-without-completed-at",
        "shared/bus/saga.py",
        "            return SagaRow(completed_at=completed_at, started_by=started_by)",
        "            return SagaRow(started_by=started_by)",
        "a completion writes an empty live row instead of its marker: the next message for "
        "the instance, a second starting one too, finds it live",
        first=("tests/bus/test_sagas.py", "tests/sim/test_sagas.py"),
    ),
    Mutant(
        "saga-not-found-writes-state",
        "shared/bus/pipeline.py",
        "            return None, Outcome.SAGA_NOT_FOUND",
        "            return StateWrite(envelope.partition_key, SAGA_ROW_TYPE, turn.row_after("
        "state, completed_at=None, message_id=envelope.id).to_json(), expected), "
        "Outcome.SAGA_NOT_FOUND",
        "a message that finds no instance writes the default state: an instance nobody "
        "started, or a completed one made live again",
        first=("tests/bus/test_sagas.py", "tests/sim/test_sagas.py"),
    ),
    Mutant(
        "saga-reply-header-unset",
        "shared/bus/context.py",
        "        if self._saga is not None:\n            # A saga's messages name the instance",
        "        if False:\n            # A saga's messages name the instance",
        "a saga's messages do not name the instance that sent them: a reply goes to its own "
        "type's partition, where no instance is, and is saga_not_found",
        first=("tests/bus/test_sagas.py", "tests/sim/test_sagas.py"),
    ),
    # -- cancellation (issue 46, shared/bus/cancel.py, the receiver's CancelScheduled branch,
    # a saga's pending timeouts) -------------------------------------------------------------
    Mutant(
        "cancel-claim-skipped",
        "shared/bus/cancel.py",
        "            await self._claim(token, outbox)  # C4",
        "            pass  # C4",
        "the canceller commits O(t) without claiming t's token (C4): a canceller that read the "
        "token and stalled commits a fresh O(t) as cancelled after t was processed and retired",
        first=("tests/bus/test_cancel.py", "tests/sim/test_cancels.py"),
    ),
    Mutant(
        "cancel-commit-skipped",
        "shared/bus/cancel.py",
        "            await self._commit(envelope, outbox)  # C5",
        "            pass  # C5",
        "the canceller answers cancelled without committing O(t) (C5): t is delivered later "
        "and processed",
        first=("tests/bus/test_cancel.py", "tests/sim/test_cancels.py"),
    ),
    Mutant(
        "cancel-sender-unchecked",
        "shared/bus/cancel.py",
        "        if command.sender != source:",
        "        if False:",
        "a CancelScheduled naming another endpoint's message is carried out: any endpoint (or "
        "a forged signal) cancels messages it did not send",
        first=("tests/bus/test_cancel_hostile.py", "tests/bus/test_cancel.py"),
    ),
    Mutant(
        "receiver-cancel-branch-skipped",
        "shared/bus/receiver.py",
        "            if isinstance(message, CancelScheduled):",
        "            if False:",
        "the receiver runs a CancelScheduled as an ordinary message: no handler takes it, and "
        "the message it names is never cancelled",
        first=("tests/bus/test_cancel.py", "tests/sim/test_cancels.py"),
    ),
    Mutant(
        "saga-handled-timeout-kept",
        "shared/bus/saga.py",
        "        gone = {message_id, *cancelled}",
        "        gone = set(cancelled)",
        "a timeout the instance handled stays among its pending timeouts",
        first=("tests/bus/test_sagas.py",),
    ),
    Mutant(
        "saga-cancelled-timeout-kept",
        "shared/bus/saga.py",
        "        gone = {message_id, *cancelled}",
        "        gone = {message_id}",
        "a timeout the instance cancelled stays among its pending timeouts",
        first=("tests/bus/test_sagas.py",),
    ),
    Mutant(
        "saga-complete-keeps-timeouts",
        "shared/bus/context.py",
        "                self.cancel(MessageHandle.model_validate(pending.handle))",
        "                pass",
        "completing an instance leaves its pending timeouts to fire (and find it completed)",
        first=("tests/bus/test_sagas.py", "tests/sim/test_cancels.py"),
    ),
    # -- document stores: a partition's rows in one document (issue 47) ------------------------
    Mutant(
        "docrows-write-id-ignored",
        "shared/bus/state/document_rows.py",
        "            if attempt and _landed(partition, write_id, sent):",
        "            if False:",
        "a document write that landed but was answered as a conflict (the store client's resend "
        "met its own change) is tried again as if it had not landed",
        first=("tests/sim/test_documents.py",),
    ),
    Mutant(
        "docrows-landed-by-write-id-only",
        "shared/bus/state/document_rows.py",
        """    return partition.written_by == write_id or any(
        row[0] in sent for row in partition.rows.values()
    )""",
        "    return partition.written_by == write_id",
        "a landed write answered as a conflict is known as landed only while the document names "
        "it: another write of the partition in between makes it be taken for a lost race (the "
        "finding of small-partition-cosmos, fixed)",
        first=("tests/sim/test_documents.py",),
    ),
    Mutant(
        "docrows-conflict-surfaced",
        "shared/bus/state/document_rows.py",
        "                continue  # another write of the partition came first: check again",
        "                raise",
        "a document changed by a write of another row of the partition fails this write too, "
        "instead of being read and checked again",
        first=("tests/sim/test_documents.py",),
    ),
    Mutant(
        "docrows-insert-overwrites",
        "shared/bus/state/document_rows.py",
        "            if row.row_key in partition.rows:",
        "            if False:",
        "a row inserted into a partition's document replaces one already there",
        first=("tests/contract/test_endpoint_rows_contract.py", "tests/sim/test_documents.py"),
    ),
    Mutant(
        "docrows-update-version-unchecked",
        "shared/bus/state/document_rows.py",
        "            if stored[0] != etag:",
        "            if False:",
        "a row's update is not checked against the row's own version inside the document",
        first=("tests/contract/test_endpoint_rows_contract.py", "tests/sim/test_documents.py"),
    ),
    Mutant(
        "docrows-commit-version-unchecked",
        "shared/bus/state/document_rows.py",
        "if not isinstance(write, Insert) and (stored is None or stored[0] != write.etag):",
        "if not isinstance(write, Insert) and stored is None:",
        "a commit's guarded updates are not checked against the rows' own versions inside the "
        "document (a second round commits over the first, a lost update)",
        first=("tests/contract/test_endpoint_rows_contract.py", "tests/sim/test_documents.py"),
    ),
    Mutant(
        "docrows-commit-audit-unchecked",
        "shared/bus/state/document_rows.py",
        "            if audit_entity.row_key in partition.rows:",
        "            if False:",
        "a commit whose message already has its audit row in the document is not refused",
        first=("tests/contract/test_endpoint_rows_contract.py",),
    ),
    Mutant(
        "docrows-delete-unchanged-unguarded",
        "shared/bus/state/document_rows.py",
        "if stored is not None and stored[0] == entity.etag:",
        "if stored is not None:",
        "the cleanup's deletes of rows it judged remove them whatever they became meanwhile",
        first=("tests/contract/test_endpoint_rows_contract.py",),
    ),
    Mutant(
        "memory-documents-etag-ignored",
        "shared/stores/memory/documents.py",
        "found = self._stored.get(key)\n        if found is None or found[1] != etag:",
        "found = self._stored.get(key)\n        if found is None:",
        "the Cosmos DB model replaces a document whatever its ETag",
        first=("tests/contract/test_documents_contract.py", "tests/sim/test_documents.py"),
    ),
    Mutant(
        "memory-documents-create-overwrites",
        "shared/stores/memory/documents.py",
        "        if key in self._stored:",
        "        if False:",
        "the Cosmos DB model's create replaces a document that exists",
        first=("tests/contract/test_documents_contract.py", "tests/sim/test_documents.py"),
    ),
    Mutant(
        "blob-documents-replace-unconditional",
        "shared/stores/blob_documents.py",
        "return await self.container.upload(self._blob(key), data, etag=etag)",
        "return await self.container.upload(self._blob(key), data)",
        "a blob document is replaced without If-Match: the last writer wins",
        first=("tests/contract/test_documents_contract.py", "tests/sim/test_documents.py"),
    ),
    # -- in-memory stores ---------------------------------------------------------------------
    Mutant(
        "memory-table-etag-ignored",
        "shared/stores/memory/table.py",
        "if op.etag is not None and current.etag != op.etag:",
        "if False:",
        "the in-memory table ignores If-Match",
        first=("tests/sim",),
    ),
    Mutant(
        "memory-blob-etag-ignored",
        "shared/stores/memory/blob.py",
        "if etag is not None and stored.etag != etag:",
        "if False:",
        "the in-memory blob container ignores If-Match",
        first=("tests/contract", "tests/sim"),
    ),
    Mutant(
        "memory-queue-no-lease",
        "shared/stores/memory/queue.py",
        "visible_at=now + visibility_timeout,\n                    dequeue_count=",
        "visible_at=now,\n                    dequeue_count=",
        "a received message stays visible (no lease)",
        first=("tests/sim",),
    ),
)
