"""Event listeners of :class:`svc.SvcSTVClient`: handlers by event, sync or async.

A handler gets the event's payload (a dict); an async one runs as a task the registry keeps until
it is done. A handler that raises, or whose task fails, is reported to ``on_error`` (default:
logged) and never reaches the caller: playback is not disturbed by a listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

log = logging.getLogger("svc")

Handler = Callable[[dict[str, Any]], Any]
H = TypeVar("H", bound=Handler)
E = TypeVar("E", bound=enum.Enum)


class Listeners(Generic[E]):
    def __init__(
        self,
        events: type[E],
        owner: str,
        on_error: Callable[[E, BaseException], None] | None = None,
    ) -> None:
        self._events = events
        self._owner = owner
        self._on_error = on_error
        self._handlers: dict[E, list[Handler]] = {e: [] for e in events}
        self._tasks: set[asyncio.Future[Any]] = set()

    def add(self, event: E | str, handler: Handler) -> Callable[[], None]:
        """Calls ``handler(payload)`` on ``event``; returns a remover."""
        ev = self._events(event)
        self._handlers[ev].append(handler)

        def remove() -> None:
            self.remove(ev, handler)

        return remove

    def remove(self, event: E | str, handler: Handler) -> None:
        with contextlib.suppress(ValueError):
            self._handlers[self._events(event)].remove(handler)

    def emit(self, event: E, payload: dict[str, Any]) -> None:
        for handler in list(self._handlers[event]):
            try:
                result = handler(payload)
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._tasks.add(task)
                    task.add_done_callback(functools.partial(self._done, event))
            except Exception as err:
                self._failed(event, err)

    def _done(self, event: E, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        err = None if task.cancelled() else task.exception()
        if err is not None:
            self._failed(event, err)

    def _failed(self, event: E, err: BaseException) -> None:
        if self._on_error is not None:
            try:
                self._on_error(event, err)
                return
            except Exception:
                pass
        log.error("%s: %s handler failed", self._owner, event.value, exc_info=err)
