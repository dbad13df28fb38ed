"""Stand-ins for packages the container's tool server imports but never uses.

The SDK's terminal and file_editor executors cannot be imported without the whole SDK, and the
SDK imports its model clients at module level: litellm, openai, the agent-client protocol, MCP.
The tool server never calls a model, yet those imports were ~85% of the ~3 s of CPU that every
episode's container spent before its first tool answered. While the tools are imported, the
packages named here resolve to stand-ins that satisfy the SDK's module-level use of them
(classes to subclass and annotate with, tables to iterate, constants); once the import is over
they are *armed*: calling or instantiating anything from them raises, so a code path that did
need one fails loudly instead of working on a stand-in.

Copied into each container beside toolserver.py: standard library only.
"""

import contextlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator
from typing import Any

# Never used by the terminal or file_editor executors; only by the SDK's LLM, MCP and ACP code.
UNUSED = ("litellm", "openai", "acp", "fastmcp", "mcp", "key_value", "aiohttp")


class StubUsed(RuntimeError):
    pass


_armed = False


def _refuse(name: str) -> None:
    if _armed:
        raise StubUsed(f"{name} is a stand-in in the tool server (its package is not loaded there)")


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class _EmptyContainer:
    """What the SDK's module-level code does with a stand-in, class or instance alike: index it
    (itself), iterate or measure it (empty), add it to a list (the list)."""

    def __getitem__(self, _key: Any) -> Any:
        return self

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __add__(self, other: Any) -> Any:
        return other

    def __radd__(self, other: Any) -> Any:
        return other


class _StubType(_EmptyContainer, type):
    """A class that is any name of a stubbed package: subclassable, usable in annotations."""

    def __getattr__(cls, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        return _stub_class(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        _refuse(cls.__qualname__)
        return super().__call__(*args, **kwargs)

    def __or__(cls, _other: Any) -> Any:
        return cls

    def __ror__(cls, _other: Any) -> Any:
        return cls


class _StubBase(_EmptyContainer):
    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        return _stub_class(f"{type(self).__qualname__}.{name}")

    def __call__(self, *_args: Any, **_kwargs: Any) -> Any:
        _refuse(type(self).__qualname__)
        return self


def _stub_class(qualname: str) -> type:
    cls = _StubType(qualname.rsplit(".", 1)[-1], (_StubBase,), {"__module__": qualname.split(".")[0]})
    cls.__qualname__ = qualname
    return cls


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        value = _stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = set(roots)

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _forget(prefixes: tuple[str, ...]) -> None:
    for name in [n for n in sys.modules if n.partition(".")[0] in prefixes]:
        del sys.modules[name]


@contextlib.contextmanager
def stubbed(roots: tuple[str, ...] = UNUSED) -> Iterator[None]:
    """Imports inside see ``roots`` as stand-ins; they are armed when the block ends. A package
    already imported for real is left as it is."""
    global _armed
    roots = tuple(r for r in roots if r not in sys.modules)
    finder = _Finder(roots)
    _armed = False
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        _armed = True


def forget_stubbed(owners: tuple[str, ...], roots: tuple[str, ...] = UNUSED) -> None:
    """Drop the stand-ins and every module of ``owners`` that was imported over them, so that a
    second import (the fallback when the stand-ins were not enough) loads the real packages."""
    _forget(roots + owners)
