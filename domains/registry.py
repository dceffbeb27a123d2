"""The domain registry: built-in domains plus plugins, loaded by the same mechanism.

Built-ins are the modules in ``domains/builtin/``; plugins are every ``*.py`` in the folders named
by ``ASSAY_DOMAINS_PATH`` (os.pathsep-separated). A module contributes ``DOMAIN`` or ``DOMAINS``.
A terminal task suite (a folder of task folders, :mod:`domains.task_folder`) needs no code: a folder
on the path that is a suite, or a suite inside one, registers as a domain named after its folder, and
so does each suite imported with ``assay tasks import harbor`` (under ``$ASSAY_HOME/tasks``), and each
environment imported from another framework with ``assay domains import`` (under
``$ASSAY_HOME/environments``, :mod:`domains.importers.environments`).
A module that fails to import, or whose domain breaks the contract or clashes with a name already
registered, is recorded as a :class:`PluginError` (file and reason) and the others still load.
The registry is a plain mapping filled by loading modules: adding a domain touches no other file.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Iterable, Iterator

from domains.base import Domain, DomainError
from storage.errors import UserError

DOMAINS_PATH_ENV = "ASSAY_DOMAINS_PATH"
# domains a sweep of "every domain" (the nightly schedule, the new-checkpoint sensor, `assay sweep`
# without --domains/--tag) leaves out unless asked for: the long-context buckets cost minutes per
# item on a CPU (bench/RESULTS.md "Long context"); sweep them with --tag long_context
ON_REQUEST_TAGS: tuple[str, ...] = ("long_context",)


@dataclass(frozen=True)
class PluginError:
    """A module that could not contribute its domains, and why."""

    source: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"


class UnknownDomainError(UserError, KeyError):
    def __init__(self, name: str, known: Iterable[str]):
        known = sorted(known)
        shown = ", ".join(known[:12]) + (f", ... ({len(known)} in all)" if len(known) > 12 else "")
        super().__init__(name)
        self.message = f"unknown domain {name!r} (known: {shown}); see `assay domains list`"

    def __str__(self) -> str:
        return self.message


@dataclass
class Registry:
    """Domains by name, in load order, plus the modules that failed to load."""

    domains: dict[str, Domain] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    errors: list[PluginError] = field(default_factory=list)

    def __contains__(self, name: object) -> bool:
        return name in self.domains

    def __iter__(self) -> Iterator[Domain]:
        return iter(self.domains.values())

    def __len__(self) -> int:
        return len(self.domains)

    @property
    def names(self) -> list[str]:
        return list(self.domains)

    def sweep_selection(self, names: Iterable[str] | None = None, tags: Iterable[str] | None = None,
                        exclude_tags: Iterable[str] | None = None) -> list[Domain]:
        """What a sweep of "every domain" means: :meth:`select`, where a selection that names no
        domain and no tag leaves out :data:`ON_REQUEST_TAGS` unless ``exclude_tags`` is given
        (an empty list keeps everything)."""
        if exclude_tags is None:
            exclude_tags = () if names or tags else ON_REQUEST_TAGS
        return self.select(names, tags, exclude_tags)

    def get(self, name: str) -> Domain:
        try:
            return self.domains[name]
        except KeyError:
            raise UnknownDomainError(name, self.domains) from None

    def select(self, names: Iterable[str] | None = None, tags: Iterable[str] | None = None,
               exclude_tags: Iterable[str] | None = None) -> list[Domain]:
        """Domains by explicit names (in the given order) and/or having any of ``tags``, less those
        having any of ``exclude_tags``."""
        chosen = [self.get(n) for n in names] if names else list(self.domains.values())
        if tags:
            wanted = set(tags)
            chosen = [d for d in chosen if wanted.intersection(d.tags)]
        if exclude_tags:
            unwanted = set(exclude_tags)
            chosen = [d for d in chosen if not unwanted.intersection(d.tags)]
        return chosen

    def add_module(self, module: object, source: str) -> None:
        found = _domains_of(module)
        if found is None:
            return  # a helper module next to the plugins: nothing to register
        if isinstance(found, PluginError):
            self.errors.append(PluginError(source, found.reason))
            return
        for domain in found:
            if domain.name in self.domains:
                self.errors.append(PluginError(
                    source, f"domain name {domain.name!r} is already registered by {self.sources[domain.name]}"
                ))
                continue
            self.domains[domain.name] = domain
            self.sources[domain.name] = source


def _domains_of(module: object) -> list[Domain] | PluginError | None:
    has_one, has_many = hasattr(module, "DOMAIN"), hasattr(module, "DOMAINS")
    if not has_one and not has_many:
        return None
    found = [getattr(module, "DOMAIN")] if has_one else []
    if has_many:
        many = getattr(module, "DOMAINS")
        if not isinstance(many, (list, tuple)):
            return PluginError("", f"DOMAINS must be a list of Domain, got {type(many).__name__}")
        found.extend(many)
    bad = [type(d).__name__ for d in found if not isinstance(d, Domain)]
    if bad:
        return PluginError("", f"DOMAIN/DOMAINS must hold domains.Domain objects, got {', '.join(bad)}")
    return found


def _describe_exception(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _builtin_modules() -> Iterator[tuple[str, str]]:
    import domains.builtin as builtin_pkg

    for info in sorted(pkgutil.iter_modules(builtin_pkg.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            yield f"domains.builtin.{info.name}", f"domains/builtin/{info.name}.py"


def plugin_files(domains_path: str | None) -> list[Path]:
    files: list[Path] = []
    for folder in (domains_path or "").split(os.pathsep):
        if folder.strip():
            files.extend(sorted(Path(folder).expanduser().glob("*.py")))
    return files


def imported_tasks_root() -> Path:
    """Where ``assay tasks import`` puts suites: ``$ASSAY_HOME/tasks``."""
    from storage.home import resolve_home

    return resolve_home() / "tasks"


def task_suite_folders(domains_path: str | None, imported: Path | None = None) -> list[Path]:
    """Task suites on the path (each folder named by it that is a suite, and each suite inside one),
    then the suites imported under ``imported`` (``$ASSAY_HOME/tasks``)."""
    from domains.task_folder import is_task_suite

    found: list[Path] = []
    folders = (domains_path or "").split(os.pathsep) + ([str(imported)] if imported is not None else [])
    for folder in folders:
        if not folder.strip():
            continue
        root = Path(folder).expanduser()
        if is_task_suite(root):
            found.append(root)
        elif root.is_dir():
            found.extend(p for p in sorted(root.iterdir()) if not p.name.startswith((".", "_")) and is_task_suite(p))
    return found


def _import_plugin(path: Path):
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    module_name = f"assay_plugin_{digest}_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def load_registry(domains_path: str | None = None, include_builtins: bool = True,
                  imported: Path | None = None, environments: Path | None = None) -> Registry:
    """Load built-ins, the plugins under ``domains_path`` (an os.pathsep-separated string), the
    task suites imported under ``imported`` and the environments imported under ``environments``
    (``assay domains import``; default: none of either)."""
    registry = Registry()
    if include_builtins:
        for module_name, source in _builtin_modules():
            try:
                registry.add_module(importlib.import_module(module_name), source)
            except (Exception, SystemExit) as exc:  # a broken module must not take the others down
                registry.errors.append(PluginError(source, _describe_exception(exc)))
    for path in plugin_files(domains_path):
        if not path.is_file():
            continue
        try:
            module = _import_plugin(path)
        except (Exception, SystemExit) as exc:
            registry.errors.append(PluginError(str(path), _describe_exception(exc)))
            continue
        registry.add_module(module, str(path))
    for folder in task_suite_folders(domains_path, imported):
        from domains.task_folder import task_suite_domain

        try:
            suite = task_suite_domain(folder)
        except (Exception, SystemExit) as exc:
            registry.errors.append(PluginError(str(folder), f"{type(exc).__name__}: {exc}"))
            continue
        registry.add_module(SimpleNamespace(DOMAIN=suite), str(folder))
    from domains.importers.environments import environment_domain, imported_environment_folders

    for folder in imported_environment_folders(environments):
        try:
            domain = environment_domain(folder)
        except (Exception, SystemExit) as exc:
            registry.errors.append(PluginError(str(folder), f"{type(exc).__name__}: {exc}"))
            continue
        registry.add_module(SimpleNamespace(DOMAIN=domain), str(folder))
    return registry


_CACHE: dict[tuple[str | None, str, str], Registry] = {}


def configured_domains_path() -> str | None:
    """``$ASSAY_DOMAINS_PATH``: the plugin folders a registry loads when none is named."""
    return os.environ.get(DOMAINS_PATH_ENV)


def get_registry(domains_path: str | None = None, *, reload: bool = False) -> Registry:
    """The process-wide registry for ``domains_path`` (defaults to ``$ASSAY_DOMAINS_PATH``).

    Reading the environment here is the one deliberate exception: the registry defines the
    Dagster partitions, which must be known when definitions load.
    """
    if domains_path is None:
        domains_path = configured_domains_path()
    imported = imported_tasks_root()
    from domains.importers.environments import environments_root

    environments = environments_root()
    key = (domains_path, str(imported), str(environments))
    if reload or key not in _CACHE:
        _CACHE[key] = load_registry(domains_path, imported=imported, environments=environments)
    return _CACHE[key]


__all__ = ["Registry", "PluginError", "UnknownDomainError", "load_registry", "get_registry", "configured_domains_path",
           "DomainError"]
