"""Ctrl-C while a batch is written and enqueued: never a batch half on its queues.

A KeyboardInterrupt raised wherever the signal lands could stop the enqueue between two messages,
or inside one, and leave jobs queued in the database that no message names. Here Ctrl-C is only
counted; the enqueue looks at the count between messages. Once: the enqueue finishes (seconds),
then the command stops and says how to stop the batch. Twice: the batch is withdrawn at the next
message boundary. Either way, the batch id is printed."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

import click


class WithdrawRequested(Exception):
    """Ctrl-C twice while enqueueing: the caller withdraws the batch."""


class Interrupts:
    def __init__(self) -> None:
        self.count = 0
        self._told = False

    def _handle(self, signum, frame) -> None:  # only counts: see the module's docstring
        self.count += 1

    def check(self, batch_id: str) -> None:
        """Between messages: say once that the enqueue goes on; raise WithdrawRequested on a second Ctrl-C."""
        if self.count >= 2:
            raise WithdrawRequested(batch_id)
        if self.count and not self._told:
            self._told = True
            click.echo(
                f"\ninterrupted: finishing the enqueue of batch {batch_id}, so that no job is left "
                "without its message; Ctrl-C again to withdraw the batch instead",
                err=True,
            )


@contextlib.contextmanager
def counted_interrupts() -> Iterator[Interrupts]:
    """For the life of the block, SIGINT is counted instead of raised (where it would have raised:
    a SIGINT a parent set to be ignored stays ignored)."""
    interrupts = Interrupts()
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield interrupts
        return
    signal.signal(signal.SIGINT, interrupts._handle)
    try:
        yield interrupts
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
