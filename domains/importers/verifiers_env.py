"""verifiers environments as Assay domains (``assay domains import verifiers SOURCE``), loaded and scored by
the ``verifiers`` package itself (0.4.0).

What a verifiers environment is in 0.4.0: the package ships only its v1 API (``verifiers.v1``; the v0
surface of ``SingleTurnEnv``, ``Rubric`` and ``Parser`` is gone from the wheel). An environment is a
*taskset*: a module exporting (``__all__``) one ``vf.Taskset`` subclass whose ``load()`` builds typed
``vf.Task``s (a ``vf.TaskData`` row: prompt, system prompt, the source's own fields such as ``answer``),
configured by a ``vf.TasksetConfig`` (``--env.taskset.*`` in verifiers). Its rubric is the task's
``@vf.reward(weight=...)`` methods (plus any plugged through ``TaskConfig.rewards``); verifiers' reward of
a rollout is their weighted sum (``Trace.reward``), computed by ``Task.score(trace)``, the entry point
verifiers' own offline re-scoring (``vf-replay``) calls on a saved transcript.

SOURCE: an installed environment module (what ``vf.import_taskset(id)`` finds: ``reverse_text``,
``owner/name@version``) or a FILE.py exporting its Taskset in ``__all__``. ``options["arguments"]``
(``--arg KEY=VALUE``, ``--args-file``) are the taskset config's fields, validated by its own config class
(an unknown one is refused with the fields it has). ``options["reference"]`` (``--reference``): the
completion that answers an item, a ``str.format`` template over the task's data fields (default
``{answer}``): verifiers has no parser to format a reference, and Assay's self-test feeds each item's
``answer`` as a completion that must earn full credit, so the import scores every item's reference with
the task's own rewards and refuses when one falls short (pass e.g. ``'<answer>{answer}</answer>'``).

An item: the task's prompt as one user turn. Assay carries the user's turn only (the policy's chat
template is applied to it), so a system prompt is folded in front of it, ``f"{system}\\n\\n{prompt}"``,
exactly as verifiers folds it for a harness that takes no system message (``Harness.resolve_prompt``).
The id is the task's own (``TaskData.id``, else an overridden ``Task.key``), else the content hash;
0.4.0 tasksets have no train/eval split of their own (a config field picks the split they load), so
``--split-from source`` is refused and the hash split applies. The task's data (JSON) rides in the item's
metadata: the scorer rebuilds the task from it and never loads the dataset again.

A score: the completion becomes the assistant's one reply of a trace (system, user, assistant: what
verifiers' tool-less ``null`` harness records), ``Task.score(trace)`` runs the rewards, and the score is
``Trace.reward / (sum of the rewards' weights)``: verifiers' weighted sum normalised so full credit on
every reward is 1.0 (a single reward of weight 1, the common case, is the sum itself). Negative weights
are refused at import, and a reward of positive weight returning a value outside [0, 1] is an error, not
clamped. Tasks are scored concurrently on one event loop per batch.

Refused by name before any inference (:class:`ImportRefused`), nothing written:

- an ``Env`` of the package's own (a scripted user, several agents, best-of-n): multi-turn episodes are
  not mapped onto Assay's agent loop yet; a task with no prompt (the user opens the conversation); a
  prompt of several turns (few-shot assistant messages) or with images;
- a ``Harness`` of the package's own, toolsets (MCP tools) on the task or the taskset, a task that needs a
  container or overrides ``setup``/``finalize``/``stage_verifier``, rewards that take the rollout's
  ``runtime`` (a sandbox: gsm8k's verifier runs ``uv run`` in it);
- judges (``TaskConfig.judges`` or a ``JudgeConfig`` field): model-graded rewards, for which Assay has
  gated judges and learned rewards (``assay reward``);
- an infinite taskset (``INFINITE``), one whose ``load()`` fails (data only on the Hugging Face Hub cannot
  be downloaded here: supply it locally), a v0 environment (``load_environment`` returning a
  ``vf.Environment``): 0.4.0 cannot load it.

Persistence: a FILE.py is copied under ``source/`` with the local files it names (string literals naming
files beside it, sibling modules it imports), so the digest refuses an edited copy. An installed module is
recorded by name, distribution, version and a digest of its files; scoring refuses when the installed
module or verifiers itself differs from the import (re-import with ``--replace``).

verifiers is imported inside functions only, and what it prints goes to stderr.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import json
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

from domains.importers.environments import (
    ImportedItem,
    ImportRefused,
    LoadedSource,
    ScoreManyFn,
    content_id,
    package_version,
    require_package,
)

KIND = "verifiers"
PACKAGE = "verifiers"
DEFAULT_REFERENCE = "{answer}"
LOCAL_FILES_LIMIT = 64 * 2**20  # bytes of local files copied beside a FILE.py source
RUNTIME_HOOKS = ("setup", "finalize", "stage_verifier")
NOT_YET = "mapping it onto Assay's agent loop is not supported yet"
_MODULE_LOCK = threading.Lock()


@contextlib.contextmanager
def _quiet():
    """What verifiers, datasets or the environment print goes to stderr (stdout may carry --json)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _vf():
    require_package(PACKAGE, "verifiers", KIND)
    try:
        with _quiet():
            import verifiers.v1 as vf
    except ImportError as exc:
        raise ImportRefused(f"verifiers {package_version(PACKAGE)} has no v1 API (verifiers.v1: {exc}): this importer "
                            "reads verifiers 0.4.0's tasksets; run `make importers`") from exc
    return vf


# -- finding the taskset -----------------------------------------------------------------------------------


def _file_module(path: Path, name: str):
    """Import ``path`` as the module ``name`` (registered, so pydantic resolves its annotations); its folder
    goes on sys.path so sibling modules it imports resolve."""
    with _MODULE_LOCK:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportRefused(f"{path}: not an importable Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        folder = str(path.parent)
        if folder not in sys.path:
            sys.path.append(folder)
        try:
            with _quiet():
                spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module


def _file_module_name(path: Path) -> str:
    """A module name of the file's own: its path and content (a file replaced in place is a new module)."""
    digest = hashlib.sha256(str(path).encode() + b"\0" + path.read_bytes()).hexdigest()[:12]
    return f"_assay_verifiers_{digest}_{''.join(c if c.isalnum() else '_' for c in path.stem)}"


def _legacy_refusal(source: str, detail: str) -> ImportRefused:
    return ImportRefused(
        f"{source}: a verifiers v0 environment ({detail}): verifiers {package_version(PACKAGE)} ships only the v1 API "
        "(verifiers.v1: a Taskset of Tasks with @vf.reward methods), so it cannot load SingleTurnEnv/Rubric/Parser "
        "environments; port it to a v1 taskset (docs/v1/tasksets.md in the verifiers repository)")


def _import_source(vf, source: str) -> tuple[Any, dict]:
    """The source's module and how to find it again: ``{"origin": "file", "file": NAME}`` or
    ``{"origin": "module", "module": NAME}``."""
    path = Path(source)
    is_file = source.endswith(".py") or path.is_file()
    try:
        if is_file:
            if not path.is_file():
                raise ImportRefused(f"{source}: no such file")
            path = path.resolve()
            return _file_module(path, _file_module_name(path)), {"origin": "file", "file": path.name}
        with _quiet():
            module = vf.import_taskset(source)
        return module, {"origin": "module", "module": module.__name__}
    except ImportRefused:
        raise
    except ModuleNotFoundError as exc:
        if is_file:
            raise ImportRefused(f"{source}: importing it failed: {exc}") from exc
        raise ImportRefused(f"no installed verifiers environment {source!r} ({exc}): install its package (e.g. "
                            "`prime env install` or pip) or give its FILE.py") from exc
    except AttributeError as exc:
        if "module 'verifiers' has no attribute" in str(exc):
            raise _legacy_refusal(source, f"it uses {str(exc).rsplit(' ', 1)[-1]}") from exc
        raise ImportRefused(f"{source}: importing it failed: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # the environment's own module raised while importing
        raise ImportRefused(f"{source}: importing it failed: {type(exc).__name__}: {exc}") from exc


def _exported(module, base: type, kind: str) -> type | None:
    """The ``base`` subclass the module exports in ``__all__`` (verifiers' own plugin rule), None if none."""
    from verifiers.v1.utils.loaders import _plugin_class

    try:
        return _plugin_class(module, base, kind)
    except (TypeError, AttributeError):
        return None
    except ValueError as exc:  # several exported: an authoring error verifiers refuses too
        raise ImportRefused(str(exc)) from exc


def _taskset_class(vf, module, source: str) -> type:
    taskset_cls = _exported(module, vf.Taskset, "taskset")
    if taskset_cls is None:
        if callable(getattr(module, "load_environment", None)):
            raise _legacy_refusal(source, "load_environment() and no exported vf.Taskset")
        raise ImportRefused(f"{source}: exports no verifiers Taskset subclass in __all__ (e.g. "
                            "`__all__ = ['MyTaskset']`), which is what verifiers loads")
    return taskset_cls


# -- what the importer refuses -------------------------------------------------------------------------


def _refuse_unsupported_classes(vf, module, taskset_cls: type, task_cls: type, source: str) -> None:
    env_cls = _exported(module, vf.Env, "environment")
    if env_cls is not None:
        raise ImportRefused(f"{source}: the environment {env_cls.__name__} of its own (an Env: a scripted user, "
                            f"several agents or attempts per episode) plays multi-turn episodes; {NOT_YET}. "
                            "Single-turn tasksets (one prompt, one reply scored by @vf.reward) are supported")
    harness_cls = _exported(module, vf.Harness, "harness")
    if harness_cls is not None:
        raise ImportRefused(f"{source}: the harness {harness_cls.__name__} of its own runs the model inside a program "
                            f"(tools, several turns); {NOT_YET}")
    if getattr(taskset_cls, "INFINITE", False):
        raise ImportRefused(f"{source}: {taskset_cls.__name__} is INFINITE (its load() yields tasks forever); Assay "
                            "keeps a fixed set of items: import a bounded taskset (a config field that sets its size)")
    if getattr(task_cls, "NEEDS_CONTAINER", False):
        raise ImportRefused(f"{source}: {task_cls.__name__} needs a container (NEEDS_CONTAINER: a sandbox per "
                            "rollout); only tasks scored on the reply alone are supported")
    for hook in RUNTIME_HOOKS:
        if getattr(task_cls, hook) is not getattr(vf.Task, hook):
            raise ImportRefused(f"{source}: {task_cls.__name__}.{hook}() runs in the rollout's runtime (a sandbox); "
                                "only tasks scored on the reply alone are supported")


def _refuse_tools(taskset_cls: type, task_cls: type, config, source: str) -> None:
    for owner, servers in ((taskset_cls, taskset_cls.toolsets(config)), (task_cls, task_cls.toolsets(config.task))):
        if servers:
            names = ", ".join(type(s).__name__ for s in servers)
            raise ImportRefused(f"{source}: {owner.__name__} gives the model tools (toolsets {names}, MCP servers); "
                                f"tool use is a multi-turn episode and {NOT_YET}")


def _judge_fields(vf, task_config) -> list[str]:
    found = [f"judges ({', '.join(type(j).__name__ for j in task_config.judges)})"] if task_config.judges else []
    for name in type(task_config).model_fields:
        value = getattr(task_config, name, None)
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, vf.JudgeConfig) for v in values) and name != "judges":
            found.append(f"the JudgeConfig field {name!r}")
    return found


def _requires_runtime(fn) -> bool:
    """verifiers' own rule (Task.score): a ``runtime`` parameter without a default needs a live runtime."""
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def _reward_hooks(vf, task_cls: type, task_config, source: str) -> list:
    """The task's rewards as verifiers merges them (decorated + plugged), checked: no judge, no runtime, weights
    not negative and not all zero."""
    judges = _judge_fields(vf, task_config)
    if judges:
        raise ImportRefused(f"{source}: the task's rewards call a model ({'; '.join(judges)}): model-graded rewards "
                            "are not imported; use Assay's gated judges or a learned reward (`assay reward`)")
    probe = task_cls.__new__(task_cls)  # hooks() reads the config only: no data is needed to list them
    probe.config = task_config
    try:
        rewards = probe.hooks("reward")
    except Exception as exc:
        raise ImportRefused(f"{source}: resolving the task's rewards failed: {type(exc).__name__}: {exc}") from exc
    if not rewards:
        raise ImportRefused(f"{source}: {task_cls.__name__} declares no @vf.reward: nothing to score a reply with")
    needs_runtime = [fn.__name__ for fn in rewards if _requires_runtime(fn)]
    if needs_runtime:
        raise ImportRefused(f"{source}: the rewards {', '.join(needs_runtime)} take the rollout's runtime (they run "
                            "in its sandbox); only rewards computed from the reply are supported")
    # offline, verifiers skips a metric that needs the runtime; a reward reading trace.metrics would then
    # score what the sandbox never measured
    metrics_needing_runtime = [fn.__name__ for fn in probe.hooks("metric") if _requires_runtime(fn)]
    if metrics_needing_runtime:
        raise ImportRefused(f"{source}: the metrics {', '.join(metrics_needing_runtime)} take the rollout's runtime "
                            "(they run in its sandbox, and rewards may read them); only tasks scored on the reply "
                            "are supported")
    weights = {fn.__name__: float(getattr(fn, "_vf_weight", 1.0)) for fn in rewards}
    negative = {name: w for name, w in weights.items() if w < 0}
    if negative:
        raise ImportRefused(f"{source}: negative reward weights {negative}: Assay's rewards lie in [0, 1] and a "
                            "penalty cannot be normalised into them without changing its meaning")
    if not any(w > 0 for w in weights.values()):
        raise ImportRefused(f"{source}: every reward has weight 0 ({weights}): nothing to score a reply with")
    return rewards


# -- items -----------------------------------------------------------------------------------------------


def _prompt_text(vf, data, item: str, source: str) -> str:
    """The task's prompt as one user turn: the system prompt folded in front (Harness.resolve_prompt's fold)."""
    from verifiers.v1.types import TextContentPart, content_text

    prompt = data.prompt
    if prompt is None:
        raise ImportRefused(f"{source}: task {item} has no prompt (the user opens the conversation: a scripted "
                            f"multi-turn episode); {NOT_YET}")
    system = [data.system_prompt] if data.system_prompt else []
    if isinstance(prompt, str):
        user = [prompt]
    else:
        roles = [m.role for m in prompt]
        if any(role not in ("system", "user") for role in roles) or roles.count("user") != 1 or roles[-1] != "user":
            raise ImportRefused(f"{source}: task {item}'s prompt is a conversation ({' / '.join(roles)}): Assay's item "
                                "is one user turn (with a system prompt); few-shot turns as messages are not supported")
        for message in prompt:
            if not isinstance(message.content, str) and any(not isinstance(p, TextContentPart)
                                                            for p in message.content):
                raise ImportRefused(f"{source}: task {item}'s prompt holds images: multimodal input is not supported")
        system += [content_text(m.content) for m in prompt if m.role == "system"]
        user = [content_text(m.content) for m in prompt if m.role == "user"]
    return "\n\n".join(part for part in [*system, *user] if part)


def _reference(template: str, fields: dict, item: str, source: str) -> str:
    try:
        return template.format_map(fields)
    except (KeyError, IndexError, AttributeError, ValueError) as exc:
        raise ImportRefused(f"{source}: the reference template {template!r} does not fit task {item} "
                            f"({type(exc).__name__}: {exc}; its fields: {', '.join(sorted(fields))}): pass --reference "
                            "with the completion that answers an item, e.g. '<answer>{answer}</answer>'") from exc


def _item_id(vf, task) -> str | None:
    if task.data.id:
        return str(task.data.id)
    if type(task).key is not vf.Task.key:  # the source overrides the identity (a durable dataset id)
        return str(task.key)
    return None


# -- scoring (shared by the import's reference check and the scorer) -----------------------------------


def _trace(vf, task, completion: str):
    """A finished one-turn trace: system and user as the null harness sends them, the completion as the one
    sampled assistant reply."""
    from verifiers.v1.state import state_cls

    data = task.data
    messages = [vf.SystemMessage(content=data.system_prompt)] if data.system_prompt else []
    messages += [vf.UserMessage(content=data.prompt)] if isinstance(data.prompt, str) else list(data.prompt or [])
    nodes = [vf.MessageNode(message=m, parent=i - 1 if i else None) for i, m in enumerate(messages)]
    nodes.append(vf.MessageNode(message=vf.AssistantMessage(content=completion),
                                parent=len(nodes) - 1 if nodes else None, sampled=True))
    return vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=data, key=task.key, hash=task.hash),
                    agent=vf.AgentInfo(config=vf.AgentConfig(), name="assay", trainable=False),
                    state=state_cls(type(task))(), nodes=nodes, is_completed=True, ok=True,
                    stop_condition="agent_completed")


def normalised_reward(trace) -> float:
    """``trace.reward`` divided by the sum of the recorded rewards' weights (see the module docstring)."""
    unscored = [name for name, reward in trace.rewards.items() if reward is None]
    if unscored:
        raise ValueError(f"the rewards {', '.join(unscored)} did not run")
    for name, reward in trace.rewards.items():
        if reward.weight > 0 and not 0 <= reward.score <= 1:
            raise ValueError(f"the reward {name!r} returned {reward.score}, outside [0, 1]: Assay cannot weigh it "
                             "(verifiers' weighted sum would leave Assay's reward range)")
    total = sum(reward.weight for reward in trace.rewards.values())
    if total <= 0:
        raise ValueError("no reward of positive weight was recorded")
    return trace.reward / total


async def _score_tasks(vf, tasks: Sequence, completions: Sequence[str]) -> list[float]:
    async def one(task, completion: str) -> float:
        trace = _trace(vf, task, completion)
        await task.score(trace)
        return normalised_reward(trace)

    return list(await asyncio.gather(*(one(t, c) for t, c in zip(tasks, completions))))


def _run(coroutine_factory):
    """Run an async batch to completion from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine_factory())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(coroutine_factory())).result()


# -- files and versions ----------------------------------------------------------------------------------


def _local_files(path: Path) -> list[tuple[Path, str]]:
    """Files a FILE.py source names beside it: string literals that are paths of files (or folders of files)
    under its folder, and sibling modules it imports. Bounded by LOCAL_FILES_LIMIT."""
    folder = path.parent
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return []
    candidates: set[Path] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and 0 < len(node.value) < 300 \
                and "\n" not in node.value:
            candidates.add(folder / node.value)
        elif isinstance(node, ast.Import):
            candidates.update(folder / f"{alias.name.split('.')[0]}.py" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            candidates.add(folder / f"{node.module.split('.')[0]}.py")
    files: dict[str, Path] = {}
    for candidate in candidates:
        try:
            resolved = candidate.resolve()
            relative = resolved.relative_to(folder.resolve())
        except (OSError, ValueError):
            continue
        if resolved == path or not relative.parts:
            continue
        if resolved.is_file():
            files[relative.as_posix()] = resolved
        elif resolved.is_dir():
            for inner in resolved.rglob("*"):
                if inner.is_file() and "__pycache__" not in inner.parts:
                    files[inner.relative_to(folder.resolve()).as_posix()] = inner
    if sum(p.stat().st_size for p in files.values()) > LOCAL_FILES_LIMIT:
        raise ImportRefused(f"{path}: the local files it names weigh more than {LOCAL_FILES_LIMIT >> 20} MiB "
                            f"({', '.join(sorted(files)[:5])}...): package it and import the installed module")
    return [(p, rel) for rel, p in sorted(files.items())]


def _module_identity(module) -> dict:
    """The installed module's distribution, version and a digest of its files."""
    from importlib import metadata

    top = module.__name__.split(".")[0]
    distributions = metadata.packages_distributions().get(top) or []
    distribution = distributions[0] if distributions else None
    return {"module": module.__name__, "distribution": distribution,
            "module_version": package_version(distribution) if distribution else None,
            "module_digest": _module_digest(module)}


def _module_digest(module) -> str:
    paths = getattr(module, "__path__", None)
    digest = hashlib.sha256()
    if paths:
        for root in paths:
            for file in sorted(Path(root).rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                    digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    elif getattr(module, "__file__", None):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()


# -- the importer ----------------------------------------------------------------------------------------


class VerifiersImporter:
    kind = KIND
    package = PACKAGE

    def load(self, source: str, options: dict[str, Any]) -> LoadedSource:
        vf = _vf()
        from verifiers.v1.utils.generic import concrete_type

        arguments = dict(options.get("arguments") or {})
        template = options.get("reference") or DEFAULT_REFERENCE
        module, where = _import_source(vf, source)
        taskset_cls = _taskset_class(vf, module, source)
        task_cls = taskset_cls.task_type()
        _refuse_unsupported_classes(vf, module, taskset_cls, task_cls, source)
        config_cls = concrete_type(taskset_cls, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
        config_id = where.get("module") or Path(source).stem
        try:
            config = config_cls.model_validate({"id": config_id, **arguments})
        except Exception as exc:  # pydantic's ValidationError names the field and what it wanted
            fields = ", ".join(f for f in config_cls.model_fields if f not in ("id", "task", "system_prompt"))
            raise ImportRefused(f"{source}: its arguments do not fit {config_cls.__name__} (fields: "
                                f"{fields or 'none'}): {exc}") from exc
        _refuse_tools(taskset_cls, task_cls, config, source)
        _reward_hooks(vf, task_cls, config.task, source)

        try:
            with _quiet():
                tasks = list(iter(taskset_cls(config)))
        except ImportRefused:
            raise
        except Exception as exc:
            text = f"{exc} {exc.__cause__!r}".lower()
            hub = isinstance(exc, ConnectionError) or "huggingface" in text or "on the hub" in text
            hint = (" (data on the Hugging Face Hub cannot be downloaded here: supply it locally, e.g. a config field "
                    "that names a local file, or a FILE.py taskset that reads one)") if hub else ""
            raise ImportRefused(f"{source}: {taskset_cls.__name__}.load() failed: {type(exc).__name__}: "
                                f"{str(exc)[:300]}{hint}") from exc
        if not tasks:
            raise ImportRefused(f"{source}: {taskset_cls.__name__}.load() yielded no tasks")

        items, configs = [], {}
        for task in tasks:
            label = f"#{task.data.idx}" + (f" ({task.data.id})" if task.data.id else "")
            if type(task) is not task_cls:
                raise ImportRefused(f"{source}: task {label} is a {type(task).__name__}, not the taskset's declared "
                                    f"{task_cls.__name__}")
            if type(task).toolsets(task.config):
                raise ImportRefused(f"{source}: task {label} gives the model tools; {NOT_YET}")
            prompt = _prompt_text(vf, task.data, label, source)
            data = task.data.model_dump(mode="json", exclude_defaults=True)
            if type(task.data).model_validate(data) != task.data:
                raise ImportRefused(f"{source}: task {label}'s data does not survive JSON (a field that is not plain "
                                    "data): the scorer could not rebuild it in another process")
            configs.setdefault(task.config.model_dump_json(), task.config)
            answer = _reference(template, task.data.model_dump(mode="json"), label, source)
            item_id = _item_id(vf, task) or content_id(prompt, answer)
            items.append((task, ImportedItem(id=item_id, prompt=prompt, answer=answer, split=None,
                                             metadata={"task": data})))
        if len(configs) != 1:
            raise ImportRefused(f"{source}: its tasks carry {len(configs)} different task configs; the scorer rebuilds "
                                "every task with one")
        task_config = next(iter(configs.values()))
        config_dump = json.loads(task_config.model_dump_json())
        if task_cls.config_type().model_validate(config_dump) != task_config:
            raise ImportRefused(f"{source}: the task config {type(task_config).__name__} does not survive JSON")
        _reward_hooks(vf, task_cls, task_config, source)

        scores = _run(lambda: _score_tasks(vf, [t for t, _ in items], [i.answer for _, i in items]))
        short = [(item.id, score) for (_, item), score in zip(items, scores) if score < 1.0]
        if short:
            first_id, first_score = short[0]
            raise ImportRefused(
                f"{source}: the reference completion {template!r} earns less than full credit from the task's own "
                f"rewards on {len(short)} of {len(items)} tasks (e.g. {first_id}: {first_score:.3f} for "
                f"{next(i.answer for _, i in items if i.id == first_id)!r}): Assay's self-test feeds each item's "
                "reference as a completion that must score 1.0; pass --reference with the completion that answers "
                "an item, a template over the task's fields (e.g. '<answer>{answer}</answer>')")

        weights = {fn.__name__: float(getattr(fn, "_vf_weight", 1.0)) for fn in tasks[0].hooks("reward")}
        total = sum(weights.values())
        settings: dict[str, Any] = {
            **where, "taskset_class": taskset_cls.__name__, "task_class": task_cls.__name__,
            "task_config": config_dump, "arguments": arguments, "reference": template, "weights": weights,
            "verifiers_version": package_version(PACKAGE)}
        files: list[tuple[Path, str]] = []
        if where["origin"] == "file":
            path = Path(source).resolve()
            files = [(path, path.name), *_local_files(path)]
        else:
            settings.update(_module_identity(module))
        rubric = ", ".join(f"{n} x{w:g}" for n, w in weights.items())
        notes = [f"scored by {task_cls.__name__}'s own rewards ({rubric}), the completion as the one reply of a chat "
                 "turn" + ("" if abs(total - 1.0) < 1e-12 else
                           f"; the weighted sum is divided by the weights' total {total:g}")]
        if any(i.prompt != (t.data.prompt if isinstance(t.data.prompt, str) else None) for t, i in items):
            notes.append("prompt: the system prompt folded in front of the task's prompt, one user turn (Assay carries "
                         "no system message; verifiers folds it so for a harness that takes none)")
        if where["origin"] == "module" and not settings["module_version"]:
            notes.append(f"{settings['module']} belongs to no installed distribution: its files' digest is checked "
                         "before scoring instead of a version")
        description = (inspect.getdoc(module) or inspect.getdoc(taskset_cls) or "").strip().split("\n")[0]
        return LoadedSource(description=description or f"verifiers taskset {taskset_cls.__name__}",
                            items=[item for _, item in items], files=files, settings=settings, notes=notes,
                            tags=("verifiers",))

    def scorer(self, folder: Path, settings: dict[str, Any]) -> ScoreManyFn:
        vf = _vf()
        imported_with = settings.get("verifiers_version")
        if package_version(PACKAGE) != imported_with:
            raise ImportRefused(f"this environment was imported with verifiers {imported_with} and verifiers "
                                f"{package_version(PACKAGE)} is installed: import it again (`assay domains import "
                                "verifiers SOURCE --name NAME --replace`) so its scores mean what they mean there")
        if settings["origin"] == "file":
            path = (Path(folder) / settings["file"]).resolve()
            try:
                module = _file_module(path, _file_module_name(path))
            except Exception as exc:
                raise ImportRefused(f"{path}: importing the imported copy failed: {type(exc).__name__}: {exc}") from exc
        else:
            name = settings["module"]
            try:
                with _quiet():
                    module = importlib.import_module(name)
            except Exception as exc:
                wanted = " ".join(str(v) for v in (settings.get("distribution") or name, settings.get("module_version"))
                                  if v)
                raise ImportRefused(f"the verifiers environment module {name!r} this domain was imported from is not "
                                    f"importable ({type(exc).__name__}: {exc}): install it again ({wanted})") from exc
            now = _module_identity(module)
            if (now["module_version"], now["module_digest"]) != (settings["module_version"], settings["module_digest"]):
                raise ImportRefused(
                    f"the verifiers environment {name!r} changed since it was imported (version "
                    f"{settings['module_version']} -> {now['module_version']}"
                    + ("" if now["module_version"] != settings["module_version"] else ", its files differ")
                    + f"): import it again (`assay domains import verifiers {name} --name NAME --replace`) or "
                    f"reinstall {settings.get('distribution') or name}"
                    + (f" {settings['module_version']}" if settings["module_version"] else ""))
        taskset_cls = _taskset_class(vf, module, str(settings.get("file") or settings.get("module")))
        task_cls = taskset_cls.task_type()
        if task_cls.__name__ != settings["task_class"]:
            raise ImportRefused(f"the taskset's task class is {task_cls.__name__}, the import's "
                                f"{settings['task_class']}: import it again")
        task_config = task_cls.config_type().model_validate(settings["task_config"])
        data_cls = task_cls.data_type()

        def score_many(completions: Sequence[str], samples: Sequence[dict]) -> list[float]:
            tasks = [task_cls(data_cls.model_validate(s["metadata"]["task"]), task_config) for s in samples]
            return _run(lambda: _score_tasks(vf, tasks, [str(c) for c in completions]))

        return score_many


IMPORTER = VerifiersImporter()

__all__ = ["IMPORTER", "VerifiersImporter", "normalised_reward"]
