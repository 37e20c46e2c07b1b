"""A filesystem that fails chosen operations: fault injection for the rename stores.

``faulty(fs)`` returns a filesystem of a subclass of ``type(fs)`` sharing ``fs``'s
configuration, whose ``mv``, ``cp_file``, ``rm_file``, ``rm`` and ``pipe_file`` consult
a list of rules first. Nothing in magicfs is patched: the store itself misbehaves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.asyn import sync_wrapper


class InjectedFault(OSError):
    """What an injected failure raises."""


class Rule:
    def __init__(self, operation: str, nth: int | None, when, after: bool, times: int | None):
        self.operation, self.nth, self.when, self.after, self.times = (
            operation,
            nth,
            when,
            after,
            times,
        )
        self.calls = 0
        self.fired = 0


def faulty(fs: Any) -> Any:
    """A copy of ``fs`` (same class and options) that can be told to fail."""
    base = type(fs)

    class Faulty(base):  # type: ignore[misc, valid-type]
        cachable = False

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.rules: list[Rule] = []
            self._lock = threading.Lock()

        def fail(
            self,
            operation: str,
            *,
            nth: int | None = None,
            when: Callable[..., bool] | None = None,
            after: bool = False,
            times: int | None = None,
        ) -> Rule:
            """Fail ``operation``: the ``nth`` call, calls whose paths satisfy ``when``,
            at most ``times`` times; ``after=True`` fails *after* doing the work (a lost reply)."""
            rule = Rule(operation, nth, when, after, times)
            self.rules.append(rule)
            return rule

        def _check(self, operation: str, *paths: Any, after: bool) -> None:
            with self._lock:
                for rule in self.rules:
                    if rule.operation != operation or rule.after != after:
                        continue
                    rule.calls += 1
                    if rule.nth is not None and rule.calls != rule.nth:
                        continue
                    if rule.when is not None and not rule.when(*paths):
                        continue
                    if rule.times is not None and rule.fired >= rule.times:
                        continue
                    rule.fired += 1
                    raise InjectedFault(f"injected failure of {operation} {paths}")

        def _real(self, name: str) -> Callable[..., Any]:
            """The store's own ``name``: async stores (gcsfs) only define ``_name``."""
            default = getattr(AbstractFileSystem, name, None)
            if getattr(base, name, None) is default and hasattr(self, f"_{name}"):
                return sync_wrapper(getattr(self, f"_{name}"), obj=self)
            return getattr(super(), name)

        def _guarded(self, operation: str, call: Callable[[], Any], *paths: Any) -> Any:
            self._check(operation, *paths, after=False)
            result = call()
            self._check(operation, *paths, after=True)
            return result

        def mv(self, path1: Any, path2: Any, *args: Any, **kwargs: Any) -> Any:
            return self._guarded(
                "mv", lambda: self._real("mv")(path1, path2, *args, **kwargs), path1, path2
            )

        def cp_file(self, path1: Any, path2: Any, **kwargs: Any) -> Any:
            return self._guarded(
                "cp_file", lambda: self._real("cp_file")(path1, path2, **kwargs), path1, path2
            )

        def rm_file(self, path: Any, **kwargs: Any) -> Any:
            return self._guarded("rm_file", lambda: self._real("rm_file")(path, **kwargs), path)

        def rm(self, path: Any, *args: Any, **kwargs: Any) -> Any:
            return self._guarded("rm", lambda: self._real("rm")(path, *args, **kwargs), path)

        def pipe_file(self, path: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
            return self._guarded(
                "pipe_file",
                lambda: self._real("pipe_file")(path, value, *args, **kwargs),
                path,
            )

    Faulty.__name__ = f"Faulty{base.__name__}"
    return Faulty(*fs.storage_args, **fs.storage_options)
