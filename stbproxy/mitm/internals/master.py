"""The lean master: a hook cache in place of mitmproxy's addon manager
(``AddonManager._iter_hooks``, ``._configure_all``), and ``MessageData.__post_init__``'s
field checks skipped."""

from __future__ import annotations

import inspect
import logging

from mitmproxy import addonmanager, exceptions, hooks, http, options
from mitmproxy import flow as mitm_flow
from mitmproxy.master import Master

_addon_errors = logging.getLogger("mitmproxy.addonmanager")


class _HookCache(addonmanager.AddonManager):
    """mitmproxy's addon manager with each event's handlers looked up once.

    mitmproxy walks every addon for every event of every flow (and triggers an "update"
    event after each, which no addon of the lean master handles); the handlers of an event
    only change when addons are added or removed, so they are listed once per event name.
    An addon's exception is logged as mitmproxy logs it, and AddonHalt stops the event.
    """

    def __init__(self, master) -> None:
        super().__init__(master)
        self._handlers: dict[str, tuple] = {}

    def register(self, addon):
        self._handlers.clear()
        return super().register(addon)

    def add(self, *addons) -> None:
        super().add(*addons)
        self._handlers.clear()  # again: an addon joins the chain only after it registered

    def remove(self, addon) -> None:
        self._handlers.clear()
        super().remove(addon)
        self._handlers.clear()

    def clear(self) -> None:
        super().clear()
        self._handlers.clear()

    def _handlers_of(self, event) -> tuple:
        handlers = self._handlers.get(event.name)
        if handlers is None:
            handlers = tuple(func for addon in self.chain for _, func in self._iter_hooks(addon, event))
            self._handlers[event.name] = handlers
        return handlers

    async def handle_lifecycle(self, event) -> None:
        await self.trigger_event(event)
        if self._handlers_of(_UPDATE):  # only then build the "update" event that follows a flow's events
            message = event.args()[0]
            if isinstance(message, mitm_flow.Flow):
                await self.trigger_event(hooks.UpdateHook([message]))

    async def trigger_event(self, event) -> None:
        handlers = self._handlers_of(event)
        if not handlers:
            return
        args = event.args()
        for func in handlers:
            try:
                result = func(*args)
                if result is not None and inspect.isawaitable(result):
                    await result
            except exceptions.AddonHalt:
                return
            except exceptions.OptionsError:
                raise
            except Exception as exc:
                _addon_errors.error(f"Addon error: {exc}", exc_info=True)


    async def fire_flow(self, event_type, flow) -> None:
        """``handle_lifecycle(event_type(flow))`` for a hook whose one argument is the flow
        (the HTTP request, response and error hooks), without making the event each time once
        its handlers are known: the fast lane fires three of them on every request."""
        handlers = self._handlers.get(event_type.name)
        if handlers is None:
            return await self.handle_lifecycle(event_type(flow))
        for func in handlers:
            try:
                result = func(flow)
                if result is not None and inspect.isawaitable(result):
                    await result
            except exceptions.AddonHalt:
                break
            except exceptions.OptionsError:
                raise
            except Exception as exc:
                _addon_errors.error(f"Addon error: {exc}", exc_info=True)
        if self._handlers_of(_UPDATE):
            await self.trigger_event(hooks.UpdateHook([flow]))


_UPDATE = hooks.UpdateHook([])


def lean_master(opts: options.Options) -> Master:
    """A master whose addon manager lists each event's handlers once (_HookCache)."""
    master = Master(opts)
    opts.changed.disconnect(master.addons._configure_all)
    master.addons = _HookCache(master)
    return master


def skip_message_checks() -> None:
    """mitmproxy type-checks every field of every message it builds, but only as a debug aid
    (under ``if __debug__``, so ``python -O`` drops it); the embedded master skips it too."""
    http.MessageData.__post_init__ = _no_checks  # type: ignore[method-assign]  # patched on purpose: replacing it is what this module is for


def _no_checks(self) -> None:
    return None
