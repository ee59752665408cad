"""A name -> object registry filled by decorators and by discovery, so adding a model, data set,
trainer or compressor is one new module (plus its YAML) and never an ``if name == ...`` chain or a
list to edit elsewhere.

:meth:`Registry.discover` imports every module of the registry's package (each registers itself
with ``@REGISTRY.register(name)``), then every entry point of the registry's group
(``workbench.trainers``, ``workbench.compressors``, ``workbench.models``, ``workbench.datasets``),
as pytest finds its plugins: a third-party package adds members without touching this tree
(``docs/extending.md``). Each registry names the config key that picks a member (``trainer.name``)
and how a member validates its config, so :func:`workbench.config.validate` is a loop over them.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Dict, Generic, Iterable, Iterator, Optional, TypeVar

from workbench.core import check

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, key: Optional[str] = None, entry_points: Optional[str] = None,
                 validate: Optional[Callable[[T, object], None]] = None) -> None:
        self.kind = kind
        self.key = key  # the config key whose value picks a member (trainer.name); None: not in validation
        self.entry_points = entry_points  # entry-point group of third-party members
        self._validate = validate  # validate(member, cfg); default: member.validate(cfg)
        self._items: Dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise KeyError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            return obj
        return deco

    def discover(self, package: str, path: Iterable[str], skip: Iterable[str] = ()) -> None:
        """Import every module of ``package`` but ``skip``, then the group's entry points."""
        for m in pkgutil.iter_modules(path):
            if m.name not in skip:
                importlib.import_module(f"{package}.{m.name}")
        if self.entry_points:
            from importlib.metadata import entry_points
            for ep in entry_points(group=self.entry_points):
                ep.load()  # the module registers its members on import

    def validate(self, cfg) -> None:
        """The member ``cfg`` picks (at :attr:`key`) checks its own config; ConfigError if unknown."""
        from omegaconf import OmegaConf
        if self.key is None:
            return
        name = OmegaConf.select(cfg, self.key, default=None)
        if name is None:
            return
        check(name in self._items, self.key, name, f"choose from {', '.join(self)}")
        member = self._items[name]
        if self._validate is not None:
            self._validate(member, cfg)
        else:
            member.validate(cfg)

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; choose from {', '.join(sorted(self._items))}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def items(self):
        return sorted(self._items.items())
