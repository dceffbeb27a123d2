"""Inspect AI tasks as Assay domains (``assay domains import inspect FILE.py[@TASK] | MODULE:TASK``).

The task is loaded with ``inspect_ai`` itself (its loader, so a file task runs in its own folder as
``inspect eval`` runs it, with ``--arg`` as the task function's arguments), and every sample's prompt is
rendered by the task's own solvers: the solver chain runs on a ``TaskState`` built as Inspect's eval
builds it, up to the call of ``generate``, and the messages it would send to the model become the
item's prompt. A scored completion goes back through the same generating solver (``generate()``, or
``multiple_choice()``, which parses the ``ANSWER:`` line and marks the chosen choices) and then through
the task's scorer, rebuilt from Inspect's registry by its registered name and the arguments the task gave
it; its value is mapped to [0, 1] by Inspect's ``value_to_float`` (C 1, P 0.5, I and N 0, a number as
it is), as Inspect's ``accuracy``/``mean`` metrics value it. So a score here is the score Inspect's
eval logs for the same completion (``tests/domains/importers/test_inspect_import.py`` checks it, item
for item, against real ``inspect_ai.eval`` runs).

Supported:

- datasets: file datasets (``json_dataset``/``csv_dataset`` of json, jsonl, csv files) and samples in
  memory (a list of ``Sample`` or a ``MemoryDataset``); the data file is copied under ``source/``;
- solvers: ``generate()`` or ``multiple_choice()`` last, optionally after ``system_message(...)``,
  ``prompt_template(...)`` and ``chain_of_thought(...)``. Assay prompts are one user turn, so the
  system messages (and a ``system_message`` of the task's generation config) are rendered at the start
  of the prompt, before the user turn, separated by a blank line; the import says so in a note;
- scorers (exactly one): ``match``, ``includes``, ``exact``, ``pattern``, ``answer``, ``f1`` and
  ``choice`` (with ``multiple_choice()``, which marks the choices it scores; with ``generate()`` alone
  Inspect scores every answer wrong, so that is refused).

Refused before anything runs or is written, by name: sandboxes (task or sample), sample files and setup
scripts, tools (``use_tools``, agents), any other solver (a custom one included), model-graded scorers
(``model_graded_qa``/``model_graded_fact``: Assay's gated judges are learned rewards, ``assay reward
train``/``assay reward check``), any scorer outside the list (custom ones included), several scorers,
scorer arguments that are code (``f1(answer_fn=...)``), multimodal input (images, audio, video,
documents), multi-turn input (assistant turns in a sample), datasets from a hub (``hf_dataset``, ``hf/``
tasks) or a remote location, samples without a target, task setup/cleanup solvers, approval policies
and dynamic sample sources. Generation settings of the task (temperature, max_tokens, epochs) are not
applied: Assay's sweep and training settings are (a note says so).

Items: the sample's own id when it has one (as text), else :func:`~domains.importers.environments.content_id`
of the prompt and first target (Inspect numbers id-less samples by position, which moves when the data
grows). The answer is the first target in the form the task's scorer pays full credit, tried in this
order: the target as it is, then ``ANSWER: target`` (the ``answer()`` scorer and ``multiple_choice()``
ask for that line; several correct letters are joined by ", "); ``metadata`` keeps the whole target list
(``target``: any of them is accepted, as Inspect's ``Target`` does), the choices (``choices``), the
sample's id in Inspect (``inspect_id``: its own, else its position from 1, as Inspect's eval numbers it)
and its position (``inspect_index``).

``inspect_ai`` is imported inside functions only: ``assay --help`` and the Dagster definitions never load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect as pyinspect
import json
import os
import threading
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlparse

from domains.importers.environments import ImportedItem, ImportRefused, LoadedSource, content_id, require_package

PACKAGE, MODULE = "inspect-ai", "inspect_ai"
NS = "inspect_ai/"
SUPPORTED_SCORERS = ("match", "includes", "exact", "pattern", "answer", "choice", "f1")
MODEL_GRADED_SCORERS = ("model_graded_qa", "model_graded_fact")
PROMPT_SOLVERS = ("system_message", "prompt_template", "chain_of_thought")
GENERATING_SOLVERS = ("generate", "multiple_choice")
TOOL_SOLVERS = ("use_tools", "basic_agent", "react", "bridge", "human_agent", "human_cli")
DATA_SUFFIXES = (".json", ".jsonl", ".csv")
POLICY_MODEL = "assay/policy"  # the model name of the TaskState a completion is scored in


# -- loading ----------------------------------------------------------------------------------------


class InspectImporter:
    kind = "inspect"
    package = PACKAGE

    def load(self, source: str, options: dict[str, Any]) -> LoadedSource:
        require_package(PACKAGE, MODULE, self.kind)
        arguments = dict(options.get("arguments") or {})
        task, task_name, task_file, read = _load_task(source, arguments)
        _refuse_task_features(task, task_name)
        prompt_steps, generating = _solver_steps(task.solver, task_name)
        scorer_spec = _scorer_spec(task.scorer, task_name)
        if scorer_spec["name"] == NS + "choice" and generating["name"] != NS + "multiple_choice":
            raise ImportRefused(f"Inspect task {task_name!r}: the choice() scorer scores the choices that the "
                                "multiple_choice() solver marks from the completion; with generate() alone Inspect "
                                "scores every answer wrong. Use multiple_choice() as the task's solver (or a match/"
                                "answer scorer on the letter)")
        samples = list(task.dataset)
        own = getattr(task.dataset, "location", None)
        data_files = list(dict.fromkeys(_local_data_file(location, task_name, task_file)
                                        for location in ([own] if own else []) + read))
        _refuse_sample_features(samples, task_name, needs_choices=generating["name"] == NS + "multiple_choice")
        system_prefix = _config_system_message(task, generating)
        prompts = _run(_render_prompts(samples, task.solver, system_prefix))
        notes: list[str] = []
        if any(_has_system(p) for p in prompts):
            notes.append("the task's system message is rendered at the start of each prompt, before the user turn "
                         "(Assay prompts are one user turn)")
        notes += _ignored_settings_notes(task, generating)
        scorer = _build(scorer_spec, "scorer")
        solver = _build(generating, "solver")
        items, unpaid = _items(samples, [p[1] for p in prompts], scorer, solver)
        if unpaid:
            notes.append(f"{len(unpaid)} item(s) have no form of their target that the task's scorer pays 1.0 (e.g. "
                         f"{unpaid[0]!r}): their reference answer is the target as written, and `assay domains check` "
                         "will say so")
        if any(len(item.metadata["target"]) > 1 for item in items):
            notes.append("list targets: the answer shown is the first target; the scorer accepts any of them, as "
                         "Inspect's Target does")
        files = [(task_file, task_file.name)] + [(path, _relative_under(path, task_file.parent)) for path in data_files]
        settings = {"task": task_name, "task_file": task_file.name, "data_files": [name for _, name in files[1:]],
                    "arguments": arguments, "solver": generating, "scorer": scorer_spec,
                    "prompt_solvers": [step["name"] for step in prompt_steps]}
        description = (getattr(task, "description", None) or
                       f"Inspect task {task_name} ({len(items)} samples, scorer {scorer_spec['name'][len(NS):]})")
        return LoadedSource(description=description, items=items, files=files, settings=settings, notes=notes,
                            tags=("inspect", scorer_spec["name"][len(NS):]))

    def scorer(self, folder: Path, settings: dict[str, Any]):
        """``score_many(completions, samples)``: each completion through the task's generating solver and
        its scorer, both rebuilt from Inspect's registry (the task file is not executed again)."""
        require_package(PACKAGE, MODULE, self.kind)
        scorer = _build(settings["scorer"], "scorer")
        solver = _build(settings["solver"], "solver")

        def score_many(completions: Sequence[str], samples: Sequence[dict]) -> list[float]:
            return _run(_score_batch(list(completions), [_state_fields(s) for s in samples], scorer, solver))

        return score_many


IMPORTER = InspectImporter()


def _split_source(source: str) -> tuple[str, str | None, str | None]:
    """("file", path, task) or ("module", module, task)."""
    if source.startswith("hf/"):
        raise ImportRefused(f"{source}: a task from a hub (hf/...) is not supported: write the task as a Python file "
                            "with its data in a local json/jsonl/csv file")
    path, at, name = source.rpartition("@") if "@" in source else (source, "", None)
    if path.endswith(".py") or Path(path).is_file():
        return "file", path, name
    module, colon, name = source.partition(":")
    if colon and module and name and "/" not in module:
        return "module", module, name
    raise ImportRefused(f"{source}: expected an Inspect task as FILE.py[@TASK] or MODULE:TASK (no such file: {path})")


def _load_task(source: str, arguments: dict[str, Any]):
    """The Task (created by Inspect with ``arguments``), its name, the file that defines it and the locations
    of the file datasets it read while loading (its dataset, few-shot examples...)."""
    read: list[str] = []
    kind, where, name = _split_source(source)
    from inspect_ai._util.registry import registry_info

    if kind == "file":
        path = Path(where).resolve()
        if not path.is_file():
            raise ImportRefused(f"{source}: no such file {where}")
        from inspect_ai import list_tasks

        names = [info.name for info in list_tasks(path.name, root_dir=path.parent)]
        if name is None:
            if len(names) != 1:
                found = f"several @task functions: {', '.join(names)}" if names else "no @task function"
                raise ImportRefused(f"{source}: {found} in {where}: name one as {where}@TASK")
            name = names[0]
        elif name not in names:
            raise ImportRefused(f"{source}: no @task named {name!r} in {where} "
                                f"(its tasks: {', '.join(names) or 'none'})")
        from inspect_ai._eval.loader import load_tasks  # what `inspect eval FILE@TASK` loads it with

        with _datasets_watched(source, read), _offline():
            tasks = load_tasks([f"{path.as_posix()}@{name}"], arguments)
        task = tasks[0]
        from inspect_ai._util.registry import registry_lookup

        _check_arguments(registry_lookup("task", name), arguments, source)
        task_file = path
    else:
        try:
            with _datasets_watched(source, read), _offline():
                module = importlib.import_module(where)
        except ImportError as exc:
            raise ImportRefused(f"{source}: cannot import module {where!r} ({exc})") from exc
        function = getattr(module, name, None)
        if function is None or not _is_registered(function, "task"):
            raise ImportRefused(f"{source}: {where}.{name} is not an Inspect @task function")
        task_file = Path(module.__file__).resolve()
        _check_arguments(function, arguments, source)
        from inspect_ai._util.path import chdir_python

        with _datasets_watched(source, read), _offline(), chdir_python(task_file.parent.as_posix()):
            task = function(**arguments)
        name = registry_info(function).name.split("/")[-1]
    return task, name, task_file, read


def _check_arguments(function, arguments: dict[str, Any], source: str) -> None:
    parameters = pyinspect.signature(function).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(set(arguments) - set(parameters))
    if unknown:
        raise ImportRefused(f"{source}: the task takes no argument {', '.join(map(repr, unknown))} (its arguments: "
                            f"{', '.join(parameters) or 'none'})")


@contextlib.contextmanager
def _datasets_watched(source: str, read: list[str]):
    """While the task loads, Inspect's public dataset readers as the task module finds them: ``hf_dataset``
    refuses by name (before anything is downloaded), and the file readers note each location they read,
    so every data file the task reads is copied with it (few-shot examples as well as its dataset)."""
    import inspect_ai.dataset as datasets_module

    def hf_dataset(path, *args, **kwargs):
        raise ImportRefused(f"{source}: the dataset is read from a hub (hf_dataset({path!r})), which is not supported: "
                            "write its samples to a local json/jsonl/csv file and load it with json_dataset or "
                            "csv_dataset (or pass the samples in memory)")

    def noting(reader):
        def read_and_note(*args, **kwargs):
            dataset = reader(*args, **kwargs)
            if getattr(dataset, "location", None):
                read.append(dataset.location)
            return dataset

        return read_and_note

    originals = {name: getattr(datasets_module, name) for name in ("hf_dataset", "json_dataset", "csv_dataset",
                                                                   "file_dataset")}
    replacements = {name: noting(reader) for name, reader in originals.items() if name != "hf_dataset"}
    replacements["hf_dataset"] = hf_dataset
    for name, replacement in replacements.items():
        setattr(datasets_module, name, replacement)
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(datasets_module, name, original)


@contextlib.contextmanager
def _offline():
    keys = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: "1" for k in keys})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _is_registered(obj: object, kind: str) -> bool:
    from inspect_ai._util.registry import is_registry_object

    return is_registry_object(obj, kind)


def _registered_name(obj: object) -> str | None:
    from inspect_ai._util.registry import is_registry_object, registry_info

    return registry_info(obj).name if is_registry_object(obj) else None


# -- what is refused ---------------------------------------------------------------------------------


def _refuse_task_features(task, name: str) -> None:
    def refuse(feature: str, todo: str):
        raise ImportRefused(f"Inspect task {name!r} uses {feature}, which Assay does not support: {todo}")

    if task.sandbox is not None:
        refuse(f"a sandbox ({getattr(task.sandbox, 'type', task.sandbox)})", "Assay scores the completion text alone; "
               "terminal tasks belong in a Harbor task suite (`assay tasks import harbor`)")
    if task.setup is not None:
        refuse("a setup solver", "render what it adds into the samples' input")
    if task.cleanup is not None:
        refuse("a cleanup function", "remove it (nothing runs in a sandbox here)")
    if task.approval:
        refuse("a tool approval policy", "tools are not supported")
    if getattr(task, "sample_source", None) is not None:
        refuse("a dynamic sample source", "write the samples to a json/jsonl/csv file")


def _solver_steps(solver, name: str) -> tuple[list[dict], dict]:
    """(the prompt solvers, the generating solver) as {name, params}; anything else refused by name."""
    from inspect_ai._util.registry import registry_params

    steps = list(solver) if isinstance(solver, Sequence) else [solver]
    specs = []
    for step in steps:
        registered = _registered_name(step)
        short = registered[len(NS):] if registered and registered.startswith(NS) else None
        if short in TOOL_SOLVERS or (registered and "agent" in registered.split("/")[-1]):
            raise ImportRefused(f"Inspect task {name!r} uses tools ({registered}): Assay scores one generated answer "
                                "with no tool calls; tool use is not supported (terminal work: a Harbor task suite)")
        if short not in PROMPT_SOLVERS + GENERATING_SOLVERS:
            label = registered or getattr(step, "__qualname__", type(step).__name__)
            what = "a built-in solver outside the supported set" if short else "a custom solver"
            raise ImportRefused(f"Inspect task {name!r} uses {what} ({label}): supported solvers are generate() or "
                                "multiple_choice(), optionally after system_message(), prompt_template() and "
                                "chain_of_thought(); render what the solver does into the samples' input")
        specs.append({"name": registered, "params": _json_params(registry_params(step), registered, name, "solver")})
    generating = [i for i, s in enumerate(specs) if s["name"][len(NS):] in GENERATING_SOLVERS]
    if len(generating) != 1 or generating[0] != len(specs) - 1:
        chain = ", ".join(s["name"][len(NS):] for s in specs)
        raise ImportRefused(f"Inspect task {name!r}: its solvers ({chain}) must "
                            "end with exactly one generate() or multiple_choice(): Assay scores one generated answer "
                            "(several generations are a multi-turn conversation, which is not supported)")
    return specs[:-1], specs[-1]


def _scorer_spec(scorers, name: str) -> dict:
    from inspect_ai._util.registry import registry_params

    scorers = [s for s in (scorers or []) if s is not None]
    if not scorers:
        raise ImportRefused(f"Inspect task {name!r} has no scorer: Assay needs one to reward a completion")
    if len(scorers) > 1:
        names = ", ".join(_registered_name(s) or "custom" for s in scorers)
        raise ImportRefused(f"Inspect task {name!r} has {len(scorers)} scorers ({names}): an Assay domain has one "
                            "reward; keep one scorer (or import the task once per scorer)")
    registered = _registered_name(scorers[0])
    short = registered[len(NS):] if registered and registered.startswith(NS) else None
    if short in MODEL_GRADED_SCORERS:
        raise ImportRefused(f"Inspect task {name!r} uses a model-graded scorer ({short}), which Assay does not "
                            "support: a model that grades completions needs a gate against being hacked; use "
                            "Assay's gated judges instead, a learned reward (`assay reward train DOMAIN`, gated by "
                            "`assay reward check DOMAIN`)")
    if short not in SUPPORTED_SCORERS:
        what = f"the built-in scorer {short}()" if short else f"a custom scorer ({registered or 'unregistered'})"
        raise ImportRefused(f"Inspect task {name!r} uses {what}, which Assay does not support: supported scorers are "
                            f"{', '.join(s + '()' for s in SUPPORTED_SCORERS)}")
    return {"name": registered, "params": _json_params(registry_params(scorers[0]), registered, name, "scorer")}


def _json_params(params: dict, registered: str, name: str, kind: str) -> dict:
    """Arguments that survive JSON (they are persisted and the object is rebuilt from them). Inspect
    records a function argument by its name, so an argument the factory types as a Callable is code."""
    from inspect_ai._util.registry import registry_lookup

    factory = registry_lookup(kind, registered)
    signature = pyinspect.signature(factory) if factory is not None else None
    code = [k for k, v in params.items() if v is not None and (callable(v) or (
        signature is not None and k in signature.parameters and "Callable" in str(signature.parameters[k].annotation)))]
    try:
        encoded = json.loads(json.dumps(params))
    except (TypeError, ValueError):
        encoded = None
    if code or encoded != params:
        code = ", ".join(code) or ", ".join(params)
        raise ImportRefused(f"Inspect task {name!r}: {registered}() takes arguments that are code ({code}), which "
                            "Assay does not support: a scorer or solver is rebuilt from its built-in name and plain "
                            "arguments (a custom answer extraction is a custom scorer)")
    return encoded


def _local_data_file(location: str, name: str, task_file: Path) -> Path:
    """The local file a file dataset was read from; anything remote refused."""
    if urlparse(str(location)).scheme not in ("", "file"):
        raise ImportRefused(f"Inspect task {name!r} reads its dataset from a remote location ({location}), which is "
                            "not supported: copy it to a local json/jsonl/csv file")
    path = Path(urlparse(str(location)).path if str(location).startswith("file:") else location)
    if not path.is_absolute():
        path = task_file.parent / path
    if not path.is_file():
        raise ImportRefused(f"Inspect task {name!r} reads its dataset from {location}, which is not a local file "
                            "(a dataset from a hub is not supported): write it to a local json/jsonl/csv file")
    if path.suffix.lower() not in DATA_SUFFIXES:
        raise ImportRefused(f"Inspect task {name!r}: dataset {path.name} is not a json, jsonl or csv file")
    return path.resolve()


def _refuse_sample_features(samples: list, name: str, needs_choices: bool) -> None:
    if not samples:
        raise ImportRefused(f"Inspect task {name!r} has no samples")
    for index, sample in enumerate(samples):
        label = f"Inspect task {name!r}, sample {sample.id if sample.id is not None else index + 1}"
        if sample.sandbox is not None:
            sandbox = getattr(sample.sandbox, "type", sample.sandbox)
            raise ImportRefused(f"{label} uses a sandbox ({sandbox}), which Assay does not support")
        if sample.files:
            raise ImportRefused(f"{label} has files ({', '.join(sample.files)}), which go into a sandbox: "
                                "not supported")
        if sample.setup:
            raise ImportRefused(f"{label} has a setup script, which runs in a sandbox: not supported")
        targets = [sample.target] if isinstance(sample.target, str) else list(sample.target)
        if not any(t.strip() for t in targets):
            raise ImportRefused(f"{label} has no target: every sample needs one to be scored")
        if needs_choices and not sample.choices:
            raise ImportRefused(f"{label} has no choices, which multiple_choice() needs")
        if not isinstance(sample.input, str):
            for message in sample.input:
                if message.role in ("assistant", "tool"):
                    raise ImportRefused(f"{label} has multi-turn input (an {message.role} turn): Assay prompts are one "
                                        "user turn (after an optional system message)")
                kinds = _content_kinds(message.content)
                if kinds - {"text"}:
                    raise ImportRefused(f"{label} has multimodal input ({', '.join(sorted(kinds - {'text'}))}), which "
                                        "Assay does not support: its prompts are text")


def _content_kinds(content) -> set[str]:
    return {"text"} if isinstance(content, str) else {getattr(part, "type", "text") for part in content}


def _config_system_message(task, generating: dict) -> str | None:
    """The system message Inspect's model call prepends from the generation config (generate()'s own
    argument overrides the task's config)."""
    return generating["params"].get("system_message") or getattr(task.config, "system_message", None)


def _ignored_settings_notes(task, generating: dict) -> list[str]:
    config = {k: v for k, v in task.config.model_dump(exclude_none=True).items() if k != "system_message"}
    config |= {k: v for k, v in generating["params"].items() if k not in ("system_message", "tool_calls", "template",
                                                                          "cot", "multiple_correct")}
    notes = []
    if config:
        notes.append(f"the task's generation settings ({', '.join(sorted(config))}) are not applied: Assay's sweep "
                     "and training settings are")
    epochs = getattr(task.epochs, "epochs", task.epochs)
    if isinstance(epochs, int) and epochs > 1:
        notes.append(f"the task's epochs ({epochs}) are not applied: a sweep's samples per item are Assay's "
                     "(eval_samples_per_item)")
    return notes


# -- rendering and scoring, both with Inspect's own objects -----------------------------------------


def _run(coroutine):
    """Run a coroutine to completion, also from a thread whose event loop is already running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    result: list = []
    errors: list = []

    def target():
        try:
            result.append(asyncio.run(coroutine))
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def _state(sample_id, input, messages, targets: list[str], choices, metadata: dict | None):
    from inspect_ai.model import ModelName
    from inspect_ai.scorer import Target
    from inspect_ai.solver import TaskState

    return TaskState(model=ModelName(POLICY_MODEL), sample_id=sample_id, epoch=1, input=input, messages=messages,
                     target=Target(targets), choices=choices, completed=False, metadata=metadata or {})


class _Rendered(Exception):
    """Stops the solver chain at the call of generate, carrying the messages the model would read."""

    def __init__(self, messages):
        self.messages = messages


async def _render_prompts(samples: list, solver, system_prefix: str | None) -> list[tuple[list, str]]:
    """Each sample's (messages, prompt): the task's solver chain, run as Inspect's eval runs it on a new
    TaskState, up to its call of generate; the messages it would send become one prompt."""
    from inspect_ai._eval.task.util import sample_messages

    async def capture(state, *args, **kwargs):
        raise _Rendered(list(state.messages))

    async def one(index: int, sample):
        targets = [sample.target] if isinstance(sample.target, str) else list(sample.target)
        state = _state(sample.id if sample.id is not None else index + 1, sample.input, sample_messages(sample),
                       targets, sample.choices, sample.metadata)
        try:
            await solver(state, capture)
        except _Rendered as rendered:
            return rendered.messages
        raise ImportRefused(f"sample {sample.id}: the task's solvers never called generate")

    messages = await asyncio.gather(*(one(i, s) for i, s in enumerate(samples)))
    out = []
    for sample_messages_ in messages:
        if system_prefix:
            from inspect_ai.model import ChatMessageSystem

            sample_messages_ = [ChatMessageSystem(content=system_prefix), *sample_messages_]
        out.append((sample_messages_, render_messages(sample_messages_)))
    return out


def render_messages(messages: Sequence) -> str:
    """The messages a model would read as one Assay prompt: the system messages, then the one user turn,
    separated by blank lines. Anything else (assistant turns, several user turns, images) is refused."""
    system, user = [], []
    for message in messages:
        kinds = _content_kinds(message.content)
        if kinds - {"text"}:
            raise ImportRefused(f"multimodal input ({', '.join(sorted(kinds - {'text'}))}) is not supported")
        if message.role == "system":
            system.append(message.text)
        elif message.role == "user":
            user.append(message.text)
        else:
            raise ImportRefused(f"multi-turn input (a {message.role} turn before generate) is not supported")
    if len(user) != 1:
        raise ImportRefused(f"the model would read {len(user)} user turns: Assay prompts are one user turn")
    return "\n\n".join([*system, user[0]])


def _has_system(rendered: tuple[list, str]) -> bool:
    return any(m.role == "system" for m in rendered[0])


def _build(spec: dict, kind: str):
    """A built-in scorer or solver rebuilt from Inspect's registry by name and arguments."""
    import inspect_ai.scorer  # noqa: F401  registers the built-ins
    import inspect_ai.solver  # noqa: F401
    from inspect_ai._util.registry import registry_create

    return registry_create(kind, spec["name"], **spec["params"])


def _state_fields(sample: dict) -> dict:
    meta = sample.get("metadata") or {}
    if "target" not in meta:
        raise ValueError(f"sample {sample.get('id')!r} has no metadata.target: it is not an item of an imported "
                         "Inspect task")
    return {"id": meta.get("inspect_id", sample.get("id")), "prompt": sample["prompt"], "target": meta["target"],
            "choices": meta.get("choices")}


async def _score_batch(completions: list[str], fields: list[dict], scorer, solver) -> list[float]:
    return list(await asyncio.gather(*(_score_one(c, f, scorer, solver) for c, f in zip(completions, fields))))


async def _score_one(completion: str, fields: dict, scorer, solver) -> float:
    """The completion as the model's output: through the generating solver (multiple_choice() marks the
    choices it names) and the scorer; the value as Inspect's accuracy/mean metrics value it."""
    from inspect_ai.model import ChatMessageUser, ModelOutput
    from inspect_ai.scorer import value_to_float

    state = _state(fields["id"], fields["prompt"], [ChatMessageUser(content=fields["prompt"], source="input")],
                   list(fields["target"]), fields["choices"], {})

    async def generate(state, *args, **kwargs):
        state.output = ModelOutput.from_content(model=POLICY_MODEL, content=completion)
        state.messages.append(state.output.message)
        return state

    state = await solver(state, generate)
    score = await scorer(state, state.target)
    if score is None or isinstance(score.value, (list, dict)):
        raise ValueError(f"the scorer returned {getattr(score, 'value', None)!r}: one value per sample expected")
    value = value_to_float()(score.value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"the scorer's value {score.value!r} is {value} as a float, outside [0, 1]")
    return value


def _reference_candidates(targets: list[str]) -> list[str]:
    first = targets[0]
    return list(dict.fromkeys([first, f"ANSWER: {first}", f"ANSWER: {', '.join(targets)}"]))


def _items(samples: list, prompts: list[str], scorer, solver) -> tuple[list[ImportedItem], list[str]]:
    """The items, and the ids of those whose target no candidate form makes the scorer pay 1.0."""
    rows = []
    for index, (sample, prompt) in enumerate(zip(samples, prompts)):
        targets = [sample.target] if isinstance(sample.target, str) else list(sample.target)
        metadata = {"target": targets, "choices": list(sample.choices) if sample.choices else None,
                    "inspect_id": sample.id if sample.id is not None else index + 1, "inspect_index": index}
        item_id = str(sample.id) if sample.id is not None else content_id(prompt, targets[0])
        rows.append((item_id, prompt, targets, metadata))

    candidates = [_reference_candidates(targets) for _, _, targets, _ in rows]
    flat = [(i, c) for i, cs in enumerate(candidates) for c in cs]
    fields = [{"id": rows[i][3]["inspect_id"], "prompt": rows[i][1], "target": rows[i][2],
               "choices": rows[i][3]["choices"]} for i, _ in flat]
    scores = _run(_score_batch([c for _, c in flat], fields, scorer, solver))
    paid: dict[int, str] = {}
    for (i, candidate), value in zip(flat, scores):
        if value == 1.0 and i not in paid:
            paid[i] = candidate
    items, unpaid = [], []
    for i, (item_id, prompt, targets, metadata) in enumerate(rows):
        if i not in paid:
            unpaid.append(item_id)
        items.append(ImportedItem(id=item_id, prompt=prompt, answer=paid.get(i, targets[0]), metadata=metadata))
    return items, unpaid


def _relative_under(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return f"data/{path.name}"


__all__ = ["IMPORTER", "InspectImporter", "render_messages"]
