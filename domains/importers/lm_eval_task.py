"""lm-evaluation-harness tasks as Assay domains: ``assay domains import lm-eval TASK.yaml`` (or a folder of
task YAMLs with ``--task NAME``, or ``lm_eval:FAMILY/FILE.yaml`` for a YAML shipped inside the lm_eval
package), loaded and scored by ``lm_eval`` itself (:mod:`domains.importers.environments` keeps the result).

Loading. The YAML is read with lm-eval's own config loader (``include:`` resolved, ``!function`` hooks
imported from the modules beside the YAML) and built into a ``ConfigurableTask`` by its ``TaskManager``, so
``doc_to_text``, ``doc_to_target``, ``process_docs``, ``!function`` hooks, ``filter_list`` and
``generation_kwargs`` mean what they mean there. Each prompt is the task's own ``fewshot_context`` (the
description, ``num_fewshot`` examples drawn by the task's fewshot sampler with lm-eval's default fewshot seed,
the doc, ``gen_prefix``), rendered in the order ``lm_eval`` renders them, so an eval item's prompt is the
very context ``lm_eval.simple_evaluate`` sends the model.

Scoring, per completion, with the task's own code: the ``until`` stop sequences of its ``generation_kwargs``
cut the completion as lm-eval's model backends cut a generation (``lm_eval.models.utils.
postprocess_generated_text``: Assay's policy does not know them), then the task's filter ensemble (default:
the first of ``filter_list``; ``--arg filter=NAME`` picks another), then the task's ``process_results`` (its
``exact_match`` with the YAML's ``ignore_case``, ``ignore_punctuation``, ``ignore_numbers`` and
``regexes_to_ignore``, or the task's own ``process_results`` hook). Other ``generation_kwargs``
(``max_gen_toks``, ``temperature``, ``do_sample``) are not passed on: sampling is the policy's.

Supported: ``output_type: generate_until`` with the metric ``exact_match``; data as local files
(``dataset_path: json|csv|parquet|arrow`` with ``dataset_kwargs.data_files``; a relative path is resolved as
lm-eval resolves it, against the current directory, else against the YAML's folder). Refused before
anything runs, naming the feature: log-likelihood task types (``loglikelihood``, ``multiple_choice``,
``loglikelihood_rolling``: an RL reward needs a generated answer; the generate_until tasks beside the YAML
are named), data only on a hub, metrics other than ``exact_match``, several generations per doc
(``repeats``), fewshot examples from a split with no local file, multimodal input, promptsource templates,
Python task classes, groups.

Overrides (``--arg KEY=VALUE``, read as TOML): any TaskConfig field replaces the YAML's (``num_fewshot=0``,
``test_split="test"``, ``dataset_kwargs={...}``), as lm-eval's own task overrides do; and

- ``data_files``: local files for a task whose data is on a hub: one file (the task's eval split) or a
  table ``{test="t.jsonl", train="tr.jsonl"}``; ``dataset_path`` becomes the files' builder (json for
  .json/.jsonl, csv, parquet, arrow) and the hub's ``dataset_name`` is dropped. A split the task names
  (``training_split``, ``fewshot_split``...) with no file is dropped with a note, unless fewshot examples
  are drawn from it;
- ``filter``: the filter ensemble that decides (default the first);
- ``id_field``: the doc field holding item ids (default: the first of ``id``, ``idx``, ``uid``,
  ``doc_id``, ``question_id`` present and unique in every doc, else a hash of prompt and answer);
- ``reference``: a Jinja template over the doc and ``target`` for each item's reference answer (a
  completion the task scores 1.0, which ``assay domains check`` scores); default the target itself.

Items: the eval docs (``test_split``, else ``validation_split``) are ``eval``; ``training_split`` (and a
validation split beside a test split) are ``train`` for ``--split-from source``. A split that serves the
fewshot examples is not imported when ``num_fewshot`` > 0 (its docs would show their own answers).

What is copied under ``source/``: the YAML, the YAMLs it includes, its hook modules (and the sibling modules
they import), and the data files; the scorer rebuilds the task from them in a new process. ``lm_eval`` is
imported inside functions only (it is slow to import and logs a lot: its logging and progress bars are kept
off the user's stdout).
"""

from __future__ import annotations

import ast
import contextlib
import glob
import importlib.util
import logging
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

from domains.importers.environments import ImportedItem, ImportRefused, LoadedSource, ScoreManyFn, content_id, require_package

KIND = "lm-eval"
DISTRIBUTION = "lm-eval"  # importlib.metadata knows it as lm-eval and lm_eval alike
MODULE = "lm_eval"
PACKAGED_PREFIX = "lm_eval:"  # lm_eval:gsm8k/gsm8k-cot-zeroshot.yaml, a YAML shipped in the package
SUPPORTED_OUTPUT = "generate_until"
LOGLIKELIHOOD_TYPES = ("loglikelihood", "multiple_choice", "loglikelihood_rolling")
SUPPORTED_METRIC = "exact_match"
# exact_match's own flags (lm_eval.api.metrics.exact_match_hf_evaluate) and the metric_list keys lm-eval reads
EXACT_MATCH_KEYS = {"metric", "aggregation", "higher_is_better", "ignore_case", "ignore_punctuation",
                    "ignore_numbers", "regexes_to_ignore"}
LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}
ID_FIELDS = ("id", "idx", "uid", "doc_id", "question_id")
OWN_ARGUMENTS = ("data_files", "filter", "id_field", "reference")
REFUSED_FIELDS = {
    "doc_to_image": "multimodal input (doc_to_image)",
    "doc_to_audio": "multimodal input (doc_to_audio)",
    "use_prompt": "promptsource templates (use_prompt), fetched from a hub",
    "custom_dataset": "a dataset built by code (custom_dataset): give its rows as local data_files",
    "class": "a Python task class (class:): only YAML tasks are loaded",
}
SPLIT_KEYS = ("test_split", "validation_split", "training_split", "fewshot_split")
FEWSHOT_CONFIG_SPLIT = "fewshot_config.split"  # an override that drops that one key
TASK_DIR = "task"
DATA_DIR = "data"
_FUNCTION_TAG = re.compile(r"!function\s+([A-Za-z_][\w.]*)")


# ------------------------------------------------------------------ quiet lm-eval


@contextlib.contextmanager
def _quiet(stdout: bool = False) -> Iterator[None]:
    """lm-eval's (and datasets') logging and progress bars off while inside; its prints to stderr
    when ``stdout``."""
    logger = logging.getLogger("lm_eval")
    level = logger.level
    logger.setLevel(logging.ERROR)
    bars = None
    with contextlib.ExitStack() as stack:
        try:
            import datasets

            bars = datasets.utils.logging.is_progress_bar_enabled()
            datasets.disable_progress_bars()
            ds_level = datasets.utils.logging.get_verbosity()
            datasets.utils.logging.set_verbosity_error()
            stack.callback(datasets.utils.logging.set_verbosity, ds_level)
        except (ImportError, AttributeError):
            pass
        if stdout:
            stack.enter_context(contextlib.redirect_stdout(sys.stderr))
        try:
            yield
        finally:
            logger.setLevel(level)
            if bars:
                import datasets

                datasets.enable_progress_bars()


# ------------------------------------------------------------------ the task's files


def _packaged_tasks() -> Path:
    """The task folder inside the installed lm_eval package (found without importing lm_eval)."""
    spec = importlib.util.find_spec("lm_eval.tasks")
    return Path(spec.origin).parent


def resolve_yaml(source: str, task: str | None) -> Path:
    """The task's YAML: a file, ``lm_eval:REL`` inside the installed package, or a folder's ``task``."""
    path = _packaged_tasks() / source[len(PACKAGED_PREFIX):] if source.startswith(PACKAGED_PREFIX) else Path(source)
    path = path.expanduser()
    if path.is_file():
        if path.suffix not in (".yaml", ".yml"):
            raise ImportRefused(f"{source}: an lm-eval task is a YAML file (or a folder of them with --task NAME)")
        if task:
            _check_task_name(path, task)
        return path.resolve()
    if not path.is_dir():
        raise ImportRefused(f"{source}: no such task YAML or folder (a YAML shipped with lm-eval: "
                            f"{PACKAGED_PREFIX}FAMILY/FILE.yaml)")
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._index import Kind

    with _quiet(stdout=True):
        index = TaskManager(include_path=str(path), include_defaults=False).task_index
    names = sorted(name for name, entry in index.items() if entry.kind == Kind.TASK)
    if not task:
        if len(names) != 1:
            raise ImportRefused(f"{source} holds {len(names)} tasks: name one with --task NAME "
                                f"({', '.join(names[:20]) or 'none found'})")
        task = names[0]
    entry = index.get(task)
    if entry is None:
        raise ImportRefused(f"--task {task!r} is not in {source}: its tasks are {', '.join(names[:20]) or 'none'}")
    if entry.kind != Kind.TASK or entry.yaml_path is None:
        raise ImportRefused(f"--task {task!r} is a {entry.kind.name.lower()} in {source}: import one of its tasks "
                            f"({', '.join(sorted(entry.tags)[:10]) or 'see its YAML'}), each as its own domain")
    return Path(entry.yaml_path).resolve()


def _check_task_name(path: Path, task: str) -> None:
    name = _raw_config(path).get("task")
    if name != task:
        raise ImportRefused(f"--task {task!r}: {path} defines the task {name!r}")


def _raw_config(path: Path, recursive: bool = True) -> dict:
    """The YAML as lm-eval's loader reads it, includes merged, ``!function`` hooks not imported."""
    from lm_eval.tasks._yaml_loader import load_yaml

    try:
        return load_yaml(path, resolve_func=False, recursive=recursive)
    except Exception as exc:  # noqa: BLE001 - a YAML lm-eval cannot read is refused with its reason
        raise ImportRefused(f"{path}: lm-eval cannot read it ({type(exc).__name__}: {exc})") from exc


def task_files(yaml_path: Path) -> list[Path]:
    """The YAML, the YAMLs it includes (recursively) and the modules its ``!function`` hooks live in (and
    the sibling modules those import)."""
    files: list[Path] = []
    pending = [yaml_path.resolve()]
    while pending:
        path = pending.pop()
        if path in files:
            continue
        files.append(path)
        text = path.read_text(encoding="utf-8")
        for qual in _FUNCTION_TAG.findall(text):
            module = qual.rpartition(".")[0]
            hook = (path.parent / f"{module.replace('.', '/')}.py").resolve()
            if module and hook.is_file():
                pending.append(hook)
        if path.suffix == ".py":
            pending += _sibling_imports(path)
            continue
        includes = _raw_config(path, recursive=False).get("include")
        for include in includes if isinstance(includes, list) else [includes] if includes else []:
            pending.append((path.parent / include).resolve() if not Path(include).is_absolute() else Path(include))
    return files


def _sibling_imports(module: Path) -> list[Path]:
    try:
        tree = ast.parse(module.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return []
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level <= 1 and node.module:
            names.add(node.module.split(".")[0])
    return [module.parent / f"{name}.py" for name in sorted(names) if (module.parent / f"{name}.py").is_file()]


def _layout(files: Sequence[Path]) -> dict[Path, str]:
    """Each task file's path under source/: the same tree below their common folder."""
    root = Path(os.path.commonpath([str(f.parent) for f in files]))
    return {f: f"{TASK_DIR}/{f.relative_to(root).as_posix()}" for f in files}


# ------------------------------------------------------------------ overrides and data


def _config_fields() -> set[str]:
    from dataclasses import fields

    from lm_eval.config.task import TaskConfig

    return {f.name for f in fields(TaskConfig)}


def split_arguments(arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(TaskConfig overrides, the importer's own arguments); an unknown key is refused."""
    known = _config_fields()
    unknown = sorted(k for k in arguments if k not in known and k not in OWN_ARGUMENTS)
    if unknown:
        raise ImportRefused(f"--arg {', '.join(unknown)}: not a field of an lm-eval task config nor one of the "
                            f"importer's ({', '.join(OWN_ARGUMENTS)}); task fields: {', '.join(sorted(known))}")
    if "task" in arguments:
        raise ImportRefused("--arg task=...: the task's name is its YAML's; pick a task of a folder with --task")
    own = {k: arguments[k] for k in OWN_ARGUMENTS if k in arguments}
    return {k: v for k, v in arguments.items() if k not in own}, own


def _eval_split(config: dict) -> str:
    split = config.get("test_split") or config.get("validation_split")
    if not split:
        raise ImportRefused(f"task {config.get('task')!r} names no test_split or validation_split: lm-eval evaluates "
                            "one of them (set one with --arg test_split=NAME)")
    return split


def _as_split_table(data_files: Any, default_split: str, where: str) -> dict[str, list[str]]:
    if isinstance(data_files, (str, os.PathLike)):
        return {default_split: [str(data_files)]}
    if isinstance(data_files, list) and all(isinstance(f, str) for f in data_files):
        return {default_split: list(data_files)}
    if isinstance(data_files, dict):
        table = {}
        for split, files in data_files.items():
            files = [files] if isinstance(files, str) else files
            if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
                raise ImportRefused(f"{where}: data_files[{split!r}] must be a path or a list of paths, got {files!r}")
            table[str(split)] = list(files)
        return table
    raise ImportRefused(f"{where}: data_files must be a path, a list of paths or a table split -> paths, "
                        f"got {data_files!r}")


def _resolve_files(patterns: list[str], bases: Sequence[Path], where: str) -> list[Path]:
    resolved: list[Path] = []
    for pattern in patterns:
        if "://" in pattern:
            raise ImportRefused(f"{where}: data file {pattern!r} is on the network: data only on a hub or a server "
                                "is not supported; give a local file")
        candidates = [Path(pattern).expanduser()] if Path(pattern).expanduser().is_absolute() else \
            [base / pattern for base in bases]
        for candidate in candidates:
            found = sorted(Path(p) for p in glob.glob(str(candidate))) if any(c in pattern for c in "*?[") else \
                ([candidate] if candidate.is_file() else [])
            if found:
                resolved += [p.resolve() for p in found]
                break
        else:
            tried = " or ".join(str(c) for c in candidates)
            raise ImportRefused(f"{where}: data file {pattern!r} not found (looked at {tried})")
    return resolved


def _builder_of(files: Sequence[Path], where: str) -> str:
    builders = {LOCAL_BUILDERS.get(f.suffix.lower()) for f in files}
    if None in builders or len(builders) != 1:
        raise ImportRefused(f"{where}: data files must share one of the extensions "
                            f"{', '.join(sorted(LOCAL_BUILDERS))} (got {', '.join(sorted({f.suffix for f in files}))})")
    return builders.pop()


def _fewshot_pool(config: dict) -> str | None:
    """The split lm-eval draws fewshot examples from (ConfigurableTask.fewshot_docs), None for samples
    written in the YAML."""
    fewshot = config.get("fewshot_config") or {}
    if fewshot.get("split") or config.get("fewshot_split"):
        return fewshot.get("split") or config.get("fewshot_split")
    if fewshot.get("samples") is not None:
        return None
    return config.get("training_split") or config.get("validation_split") or config.get("test_split")


def plan_data(config: dict, own: dict, yaml_path: Path) -> tuple[dict, dict[str, list[Path]], list[str]]:
    """Decide the task's data: (config overrides, split -> local files, notes). Refuses data only on a hub,
    network files, and fewshot examples from a split with no local file."""
    notes: list[str] = []
    overrides: dict[str, Any] = {}
    eval_split = _eval_split(config)
    if "data_files" in own:
        where = "--arg data_files"
        table = _as_split_table(own["data_files"], eval_split, where)
        files = {split: _resolve_files(patterns, [Path.cwd()], where) for split, patterns in table.items()}
        builder = _builder_of([f for fs in files.values() for f in fs], where)
        if config.get("dataset_path") not in (builder,) and "dataset_path" not in own:
            overrides["dataset_path"] = builder
            notes.append(f"data: {builder} files given with data_files replace the task's dataset_path "
                         f"{config.get('dataset_path')!r}" + (f" (its dataset_name {config['dataset_name']!r} dropped)"
                                                               if config.get("dataset_name") else ""))
            overrides["dataset_name"] = None
        kwargs = dict(config.get("dataset_kwargs") or {})
        kwargs.pop("data_files", None)
        overrides["dataset_kwargs"] = kwargs
    else:
        where = f"{yaml_path.name}: dataset_kwargs.data_files"
        path = config.get("dataset_path")
        kwargs = dict(config.get("dataset_kwargs") or {})
        if path not in set(LOCAL_BUILDERS.values()) or "data_files" not in kwargs:
            raise ImportRefused(
                f"task {config.get('task')!r}: data only on a hub is not supported (dataset_path {path!r}"
                + ("" if path in set(LOCAL_BUILDERS.values()) else ", not a local builder json|csv|parquet|arrow")
                + ", no dataset_kwargs.data_files): give its rows as local files in the dataset's format, e.g. "
                  f"--arg data_files=FILE.jsonl (the {eval_split} split) or --arg 'data_files={{{eval_split}=\"t.jsonl\", "
                  "train=\"tr.jsonl\"}'")
        table = _as_split_table(kwargs["data_files"], "train", where)
        # lm-eval hands data_files to datasets, which resolves a relative path against the current directory;
        # the YAML's folder next, so a task folder carried with its data imports from anywhere
        files = {split: _resolve_files(patterns, [Path.cwd(), yaml_path.parent], where)
                 for split, patterns in table.items()}
        builder = _builder_of([f for fs in files.values() for f in fs], where)
        if builder != path:
            raise ImportRefused(f"{where}: dataset_path {path!r} but the files are {builder} files")
        kwargs.pop("data_files")
        overrides["dataset_kwargs"] = kwargs
    if "data_dir" in overrides["dataset_kwargs"]:
        raise ImportRefused(f"task {config.get('task')!r}: dataset_kwargs.data_dir is not supported: list the files "
                            "with data_files")
    if eval_split not in files:
        raise ImportRefused(f"task {config.get('task')!r} evaluates the split {eval_split!r}, which has no local data "
                            f"file (data_files has {', '.join(sorted(files)) or 'none'}): data only on a hub is not "
                            f"supported; add --arg 'data_files={{{eval_split}=\"FILE\"}}'")
    num_fewshot = config.get("num_fewshot") or 0
    pool = _fewshot_pool(config)
    if num_fewshot > 0 and pool is not None and pool not in files:
        raise ImportRefused(f"task {config.get('task')!r}: {num_fewshot}-shot examples come from the split {pool!r}, "
                            "which has no local data file (fewshot from a hub split is not supported): add it to "
                            "data_files or pass --arg num_fewshot=0")
    for key in SPLIT_KEYS:
        split = config.get(key)
        if split and split not in files and key != ("test_split" if config.get("test_split") else "validation_split"):
            overrides[key] = None
            notes.append(f"data: {key} {split!r} has no local data file: not used")
    fewshot = config.get("fewshot_config") or {}
    if fewshot.get("split") and fewshot["split"] not in files:
        overrides[FEWSHOT_CONFIG_SPLIT] = None  # build_task drops it from the resolved fewshot_config
        notes.append(f"data: fewshot_config.split {fewshot['split']!r} has no local data file: not used")
    return overrides, files, notes


# ------------------------------------------------------------------ refusals


def refuse_unsupported(config: dict, yaml_path: Path) -> None:
    """Refuse what the importer does not support, naming it, before anything is built."""
    name = config.get("task")
    if "group" in config or not isinstance(name, str):
        raise ImportRefused(f"{yaml_path}: a group of tasks ({config.get('group') or name!r}): import one of its tasks "
                            "(a folder with --task NAME), each as its own domain")
    for field, what in REFUSED_FIELDS.items():
        if config.get(field) not in (None, False, ""):
            raise ImportRefused(f"task {name!r}: {what} is not supported")
    output_type = config.get("output_type", SUPPORTED_OUTPUT)
    if output_type != SUPPORTED_OUTPUT:
        variants = generate_variants(yaml_path)
        hint = (f"; the generate_until tasks beside it: {', '.join(variants)}" if variants
                else "; no generate_until task sits beside it")
        raise ImportRefused(f"task {name!r}: output_type {output_type!r} is scored by log-likelihoods of fixed answers, "
                            f"not by a generated answer, and an RL reward needs a generated answer: only "
                            f"output_type: generate_until is supported{hint}")
    metrics = config.get("metric_list") or [{"metric": SUPPORTED_METRIC}]
    others = [str(m.get("metric")) if isinstance(m, dict) else str(m) for m in metrics
              if not isinstance(m, dict) or m.get("metric") != SUPPORTED_METRIC]
    if others:
        raise ImportRefused(f"task {name!r}: metric {', '.join(others)} is not supported: only exact_match (with "
                            "ignore_case, ignore_punctuation, ignore_numbers, regexes_to_ignore) becomes a reward")
    for metric in metrics:
        if metric.get("hf_evaluate"):
            raise ImportRefused(f"task {name!r}: exact_match from Hugging Face evaluate (hf_evaluate: true) is not "
                                "supported: it is fetched from a hub; drop the flag to use lm-eval's own")
        extra = sorted(set(metric) - EXACT_MATCH_KEYS)
        if extra:
            raise ImportRefused(f"task {name!r}: exact_match option {', '.join(extra)} is not supported (lm-eval's "
                                f"exact_match takes {', '.join(sorted(EXACT_MATCH_KEYS - {'metric'}))})")
    repeats = config.get("repeats", 1)
    if repeats not in (None, 1):
        raise ImportRefused(f"task {name!r}: repeats: {repeats} (several generations per doc, combined by its filters) "
                            "is not supported: an Assay reward scores one completion")


def generate_variants(yaml_path: Path, limit: int = 8) -> list[str]:
    """generate_until tasks defined by the YAMLs in ``yaml_path``'s folder (and below it)."""
    names = []
    paths = sorted(yaml_path.parent.rglob("*.yaml"))[:400]
    for path in paths:
        try:
            config = _raw_config(path)
        except ImportRefused:
            continue
        if config.get("output_type", SUPPORTED_OUTPUT) != SUPPORTED_OUTPUT:
            continue
        try:
            refuse_unsupported(config, path)  # a variant the importer would refuse anyway is no hint
        except ImportRefused:
            continue
        names.append(config["task"])
    return sorted(set(names))[:limit]


# ------------------------------------------------------------------ building the task


def build_task(yaml_path: Path, overrides: dict, data_files: dict[str, list[Path]]):
    """The ConfigurableTask lm-eval builds from the YAML, with ``overrides`` over its config and its data
    read from ``data_files``; ``num_fewshot`` defaults to 0 and the fewshot seed is lm-eval's default, as
    ``lm_eval.simple_evaluate`` sets them."""
    from lm_eval.defaults import DEFAULT_OTHER_SEED
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._yaml_loader import load_yaml

    config = load_yaml(yaml_path, resolve_func=True, recursive=True)
    config.update({k: v for k, v in overrides.items() if k != FEWSHOT_CONFIG_SPLIT})
    if FEWSHOT_CONFIG_SPLIT in overrides and isinstance(config.get("fewshot_config"), dict):
        config["fewshot_config"] = {k: v for k, v in config["fewshot_config"].items() if k != "split"}
    config["dataset_kwargs"] = {**(config.get("dataset_kwargs") or {}),
                                "data_files": {split: [str(f) for f in files] for split, files in data_files.items()}}
    loaded = TaskManager(include_defaults=False).load(config)
    task = loaded["tasks"][config["task"]]
    if task.get_config("num_fewshot") is None:
        task.set_config(key="num_fewshot", value=0)
    task.set_fewshot_seed(seed=DEFAULT_OTHER_SEED)
    return task


def _docs(task, role: str) -> list:
    return list({"test": task.test_docs, "validation": task.validation_docs, "training": task.training_docs}[role]())


def _filter_names(task) -> list[str]:
    return [ensemble.name for ensemble in task._filters]


class _TaskScorer:
    """Scores completions of a built task's docs with the task's own stop sequences, filter ensemble and
    process_results."""

    def __init__(self, task, filter_name: str):
        from lm_eval.models.utils import postprocess_generated_text

        self.task = task
        self.postprocess = postprocess_generated_text
        ensembles = {ensemble.name: ensemble for ensemble in task._filters}
        self.ensemble = ensembles[filter_name]
        self.until = (task.config.generation_kwargs or {}).get("until")
        self.docs: dict[str, list] = {}
        self.lock = threading.Lock()

    def doc(self, metadata: dict):
        role, index = metadata.get("lm_eval_docs"), metadata.get("doc_index")
        if role not in ("test", "validation", "training") or not isinstance(index, int):
            raise ValueError(f"sample metadata {metadata!r} names no lm-eval doc (lm_eval_docs, doc_index)")
        if role not in self.docs:
            self.docs[role] = _docs(self.task, role)
        return self.docs[role][index]

    def score_many(self, completions: Sequence[str], samples: Sequence[dict]) -> list[float]:
        from lm_eval.api.instance import Instance

        with self.lock, _quiet():
            instances = []
            for completion, sample in zip(completions, samples, strict=True):
                doc = self.doc(sample.get("metadata") or {})
                text = self.postprocess(completion if isinstance(completion, str) else "", self.until, None)
                instance = Instance(request_type=SUPPORTED_OUTPUT, doc=doc, arguments=(sample.get("prompt", ""), {}),
                                    idx=0, metadata=(self.task.config.task, sample["metadata"]["doc_index"], 1))
                instance.resps.append(text)
                instances.append(instance)
            if not instances:
                return []
            self.ensemble.apply(instances)
            scores = []
            for instance in instances:
                result = self.task.process_results(instance.doc, [instance.filtered_resps[self.ensemble.name]])
                if SUPPORTED_METRIC not in result:
                    raise ValueError(f"the task's process_results returned {sorted(result)}, no {SUPPORTED_METRIC}")
                value = float(result[SUPPORTED_METRIC])
                if not 0.0 <= value <= 1.0:
                    raise ValueError(f"the task's exact_match is {value}, outside [0, 1]")
                scores.append(value)
            return scores


# ------------------------------------------------------------------ the importer


def _pick_ids(docs: list[tuple[str, int, dict]], id_field: str | None) -> tuple[list[str] | None, str | None]:
    """Ids from a doc field: ``id_field`` if given (refused when missing or not unique), else the first of
    :data:`ID_FIELDS` every doc has with unique values; (None, None) for content hashes."""
    candidates = [id_field] if id_field else list(ID_FIELDS)
    for field in candidates:
        values = [doc.get(field) if isinstance(doc, dict) else None for _, _, doc in docs]
        ok = all(isinstance(v, (str, int)) and not isinstance(v, bool) and str(v).strip() for v in values)
        if ok and len({str(v) for v in values}) == len(values):
            return [str(v) for v in values], field
        if id_field:
            raise ImportRefused(f"--arg id_field={id_field}: not a unique, non-empty str/int field of every doc")
    return None, None


def _target_text(task, doc) -> Any:
    target = task.doc_to_target(doc)
    if task.config.doc_to_choice is not None and isinstance(target, int):
        target = task.doc_to_choice(doc)[target]
    return target


class LmEvalImporter:
    kind = KIND
    package = DISTRIBUTION

    def load(self, source: str, options: dict[str, Any]) -> LoadedSource:
        require_package(DISTRIBUTION, MODULE, KIND)
        arguments = dict(options.get("arguments") or {})
        with _quiet(stdout=True):
            yaml_path = resolve_yaml(source, options.get("task"))
            config_overrides, own = split_arguments(arguments)
            raw = {**_raw_config(yaml_path), **config_overrides}
            refuse_unsupported(raw, yaml_path)
            data_overrides, data_files, notes = plan_data(raw, own, yaml_path)
            overrides = {**config_overrides, **data_overrides}
            files = task_files(yaml_path)
            try:
                task = build_task(yaml_path, overrides, data_files)
            except ImportRefused:
                raise
            except Exception as exc:  # noqa: BLE001 - lm-eval's own error, named
                raise ImportRefused(f"{source}: lm-eval could not build the task ({type(exc).__name__}: {exc})") from exc
            return self._loaded(source, yaml_path, task, overrides, data_files, files, own, notes)

    def _loaded(self, source, yaml_path, task, overrides, data_files, files, own, notes) -> LoadedSource:
        from lm_eval.utils import apply_template

        name = task.config.task
        filters = _filter_names(task)
        filter_name = own.get("filter") or filters[0]
        if filter_name not in filters:
            raise ImportRefused(f"--arg filter={filter_name}: task {name!r} has the filters {', '.join(filters)}")
        if len(filters) > 1:
            notes.append(f"scored after the filter {filter_name!r} (the task also reports "
                         f"{', '.join(f for f in filters if f != filter_name)}; --arg filter=NAME picks another)")
        if getattr(task, "multiple_input", 0):
            raise ImportRefused(f"task {name!r}: doc_to_text returns a choice index (several contexts per doc): "
                                "not supported")
        num_fewshot = task.get_config("num_fewshot") or 0
        pool = task.fewshot_cfg.split or (None if task.fewshot_cfg.samples is not None else
                                           task.config.training_split or task.config.validation_split or
                                           task.config.test_split)
        eval_role = "test" if task.has_test_docs() else "validation"
        roles = [eval_role] + (["validation"] if eval_role == "test" and task.has_validation_docs() and
                               task.config.validation_split != task.config.test_split else []) + \
                (["training"] if task.has_training_docs() else [])
        split_of_role = {"test": task.config.test_split, "validation": task.config.validation_split,
                         "training": task.config.training_split}
        rendered: list[tuple[str, int, Any]] = []
        skipped = []
        seen_splits = set()
        for role in roles:
            split = split_of_role[role]
            if split in seen_splits:
                continue
            seen_splits.add(split)
            if role != eval_role and num_fewshot > 0 and split == pool:
                skipped.append(f"{role} split {split!r} (it holds the {num_fewshot}-shot examples)")
                continue
            rendered += [(role, i, doc) for i, doc in enumerate(_docs(task, role))]
        if skipped:
            notes.append(f"not imported: {'; '.join(skipped)}")
        reference = own.get("reference")
        prompts, targets, answers = [], [], []
        for role, _, doc in rendered:  # eval docs first, in order, as lm-eval renders them
            context = task.fewshot_context(doc=doc, num_fewshot=num_fewshot, system_instruction=None,
                                           apply_chat_template=False, fewshot_as_multiturn=False, chat_template=None,
                                           gen_prefix=task.doc_to_prefix(doc))
            target = _target_text(task, doc)
            if reference:
                answer = apply_template(reference, {**doc, "target": target})
            else:
                answer = str(target[0] if isinstance(target, list) and target else target)
            prompts.append(context)
            targets.append(target if isinstance(target, (str, int, float, list)) else str(target))
            answers.append(answer)
        ids, id_field = _pick_ids(rendered, own.get("id_field"))
        if ids is None:
            ids = [content_id(p, a) for p, a in zip(prompts, answers)]
        items = [ImportedItem(id=item_id, prompt=prompt, answer=answer,
                              split="eval" if role in (eval_role,) else "train",
                              metadata={"lm_eval_docs": role, "doc_index": index, "target": target})
                 for item_id, prompt, answer, target, (role, index, _) in zip(ids, prompts, answers, targets, rendered)]
        if eval_role == "test" and "validation" in [r for r, _, _ in rendered]:
            notes.append("the validation split is imported as train items beside the test split (eval)")
        scorer = _TaskScorer(task, filter_name)
        scores = scorer.score_many([item.answer for item in items], [
            {"prompt": item.prompt, "metadata": item.metadata} for item in items])
        missed = [item.id for item, score in zip(items, scores) if score != 1.0]
        if missed:
            notes.append(f"{len(missed)} of {len(items)} reference answers do not score 1.0 through the task's own "
                         f"filter and exact_match (e.g. {missed[0]}): `assay domains check` fails on them; give a "
                         "reference completion with --arg 'reference=TEMPLATE' (Jinja over the doc and target)")
        until = (task.config.generation_kwargs or {}).get("until")
        if until:
            notes.append(f"completions are cut at the task's stop sequences {until!r} before its filters, as lm-eval's "
                         "model backends cut a generation")
        ignored = sorted(k for k in (task.config.generation_kwargs or {}) if k != "until")
        if ignored:
            notes.append(f"generation_kwargs {', '.join(ignored)} are not passed to Assay's policy (its sampling is "
                         "its own)")
        if id_field:
            notes.append(f"item ids from the docs' field {id_field!r}")
        layout = _layout(files)
        copied = [(path, relative) for path, relative in layout.items()]
        data_settings: dict[str, list[str]] = {}
        for split, paths in data_files.items():
            data_settings[split] = []
            for k, path in enumerate(paths):
                relative = f"{DATA_DIR}/{split}/{k}-{path.name}"
                copied.append((path, relative))
                data_settings[split].append(relative)
        settings = {"task_yaml": layout[yaml_path], "task": name, "overrides": overrides, "data_files": data_settings,
                    "filter": filter_name}
        description = f"lm-eval task {name}: exact_match after its {filter_name!r} filter"
        if num_fewshot:
            description += f", {num_fewshot}-shot prompts"
        tags = tuple(t for t in ([task.config.tag] if isinstance(task.config.tag, str) else task.config.tag or [])
                     if isinstance(t, str))
        return LoadedSource(description=description, items=items, files=copied, settings=settings, notes=notes,
                            tags=tags)

    def scorer(self, folder: Path, settings: dict[str, Any]) -> ScoreManyFn:
        require_package(DISTRIBUTION, MODULE, KIND)
        folder = Path(folder)
        data_files = {split: [folder / relative for relative in paths]
                      for split, paths in settings["data_files"].items()}
        with _quiet(stdout=True):
            task = build_task(folder / settings["task_yaml"], settings["overrides"], data_files)
        return _TaskScorer(task, settings["filter"]).score_many


IMPORTER = LmEvalImporter()

__all__ = ["IMPORTER", "LmEvalImporter", "build_task", "generate_variants", "plan_data", "refuse_unsupported",
           "resolve_yaml", "split_arguments", "task_files"]
