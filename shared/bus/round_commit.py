"""What a round does with the tokens it created when its commit does not succeed: the one rule
every mode's commit follows (token mode in ``shared.bus.receiver``, the window modes in
``shared.bus.modes.common``), so that the modes cannot drift apart on it.

- Refused before or by the commit (``PermanentFailure``, for example ``LimitExceeded``: a size
  the message fixes), nothing was written: the tokens can never be committed, so they are
  deleted now, and the error goes on (the message parks).
- Lost to another writer (``TransactionFailed``): nothing of this round was written, so its
  tokens are deleted and the round starts again (``Conflict``).
- An unknown outcome (``OutcomeUnknown``): the commit may still land, so its tokens must stay.
  If it landed, the next round finds the record listing exactly these tokens; if not, they are
  abandoned (recorded so) and the cleanup removes them after the grace period. The round
  starts again.

Anything else raised (a bug, a storage outage before the commit was sent) leaves the tokens to
the cleanup: they are unclaimed and uncommitted, so they are never signalled, and the cleanup
removes them after the grace period.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from shared.bus.outgoing import CreatedTokens, discard_tokens
from shared.bus.rounds import Conflict
from shared.errors import OutcomeUnknown, PermanentFailure, TransactionFailed
from shared.stores.blob import BlobContainer

T = TypeVar("T")


async def commit_round(
    tokens: BlobContainer,
    created: CreatedTokens,
    abandoned: list[str],
    commit: Callable[[], Awaitable[T]],
) -> T:
    """``commit()`` (which builds the round's rows and commits them in one transaction), with
    the round's ``created`` tokens handled as the module says when it does not succeed;
    ``abandoned`` collects the tokens of a commit whose outcome is unknown."""
    try:
        return await commit()
    except PermanentFailure:
        await discard_tokens(tokens, created.committed_candidates)
        raise
    except TransactionFailed as e:
        await discard_tokens(tokens, created.committed_candidates)
        raise Conflict from e
    except OutcomeUnknown as e:
        abandoned.extend(o.token for o in created.committed_candidates)
        raise Conflict from e
