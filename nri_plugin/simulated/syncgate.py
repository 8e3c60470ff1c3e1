"""containerd's plugin-sync lock (NRI adaptation's `syncLock`), for the simulator.

Every CRI operation that talks to plugins (run/stop/remove pod, create/start/stop/update/
remove container) holds it shared from before its first NRI call until it is done, and a
newly connected plugin's Synchronize holds it alone. So a container is either in the
state a new plugin synchronizes with, or that plugin gets its events: none falls between
the two. As with Go's RWMutex, a waiting Synchronize stops new operations from starting,
so a steady stream of pods cannot keep a plugin from registering.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class SyncGate:
    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._operations = 0
        self._syncs_waiting = 0
        self._syncing = False

    @asynccontextmanager
    async def operation(self) -> AsyncIterator[None]:
        """One CRI operation (BlockPluginSync ... Unblock)."""
        async with self._cond:
            await self._cond.wait_for(lambda: not self._syncing and not self._syncs_waiting)
            self._operations += 1
        try:
            yield
        finally:
            async with self._cond:
                self._operations -= 1
                self._cond.notify_all()

    @asynccontextmanager
    async def sync(self) -> AsyncIterator[None]:
        """One plugin's Synchronize (requestPluginSync ... finishedPluginSync)."""
        async with self._cond:
            self._syncs_waiting += 1
            try:
                await self._cond.wait_for(lambda: not self._syncing and not self._operations)
            finally:
                self._syncs_waiting -= 1
            self._syncing = True
        try:
            yield
        finally:
            async with self._cond:
                self._syncing = False
                self._cond.notify_all()
