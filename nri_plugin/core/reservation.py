"""Reservation: what a node took for one admitted container, until commit or rollback.

Deciding takes nothing (core.decision): a plan names what the container would hold (its
placement record: GPUs, exclusive CPUs, NUMA nodes; its RT time). Admitting it is the one
step that takes: the node's books record the plan's placement (else the container's GPU
grant alone), its RT time and its place in the CPU pool, and hand back a Reservation.
Whatever fails after that (the RT room in the ancestors, the answer) rolls it back, which
gives every book back what the owner held; once the container is the registry's, commit
keeps them. As a context manager, a reservation left without commit rolls back.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from nri_plugin.core.errors import ReservationClosed

OPEN, COMMITTED, ROLLED_BACK = "open", "committed", "rolled back"


class Reservation:
    """What `owner` holds since its admission; `release` gives all of it back."""

    __slots__ = ("_release", "owner", "state")

    def __init__(self, owner: str, release: Callable[[str], None]) -> None:
        self.owner = owner
        self._release = release
        self.state = OPEN

    def commit(self) -> None:
        """Keep what was taken (again: nothing). ReservationClosed after a rollback."""
        if self.state == ROLLED_BACK:
            raise ReservationClosed(f"reservation of {self.owner} was rolled back")
        self.state = COMMITTED

    def rollback(self) -> None:
        """Give back everything taken (again: nothing). ReservationClosed after a
        commit: the container holds it now, and only its end releases it."""
        if self.state == COMMITTED:
            raise ReservationClosed(f"reservation of {self.owner} was committed")
        if self.state == OPEN:
            self.state = ROLLED_BACK
            self._release(self.owner)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.state == OPEN:
            self.rollback()

    def __repr__(self) -> str:
        return f"Reservation({self.owner!r}, {self.state})"


def nothing_taken(owner: str) -> Reservation:
    """A closed reservation for a container that was not admitted (refused): nothing to
    keep or give back."""
    reservation = Reservation(owner, _keep)
    reservation.state = ROLLED_BACK
    return reservation


def _keep(owner: str) -> None:
    """Nothing was taken for `owner`."""
