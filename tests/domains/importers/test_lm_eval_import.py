"""lm-evaluation-harness tasks as domains (domains.importers.lm_eval_task): the same completions scored by
lm-eval's own evaluation (``lm_eval.simple_evaluate`` with a model that returns them, per-sample results
logged) and by the imported domain give identical per-item scores, on the example task and on a task YAML
shipped inside the lm_eval package (with local data in its dataset's format); refusals name the feature
and write nothing; the import persists and loads in a new process; an edited copy is refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from domains.importers.environments import (ImportRefused, environment_domain, import_environment,
                                            environments_root)
from tests.conftest import REPO, run_cli, user_shell

lm_eval = pytest.importorskip("lm_eval", reason="the importers extra (lm-eval) is not installed: make importers")

EXAMPLE = REPO / "examples" / "environments" / "lm_eval" / "arith_words.yaml"
FIXTURES = Path(__file__).parent / "lm_eval_fixtures"
GSM8K_DATA = FIXTURES / "gsm8k_local"
PACKAGED_GSM8K = "lm_eval:gsm8k/gsm8k.yaml"  # the YAML in site-packages, never copied into the repo
GSM8K_FILES = {"test": str(GSM8K_DATA / "test.jsonl"), "train": str(GSM8K_DATA / "train.jsonl")}


# -- lm-eval's own evaluation of canned completions ----------------------------------------------------


def canned_model(completions: dict[str, str]):
    """An lm_eval LM whose generate_until answers each context with its canned completion, cut at the
    request's stop sequences as lm-eval's model backends cut a generation (HFLM: handle_stop_sequences,
    postprocess_generated_text)."""
    from lm_eval.api.model import LM
    from lm_eval.models.utils import handle_stop_sequences, postprocess_generated_text

    class CannedLM(LM):
        def generate_until(self, requests, disable_tqdm: bool = False):
            out = []
            for request in requests:
                context, gen_kwargs = request.args[0], dict(request.args[1])
                until = handle_stop_sequences(gen_kwargs.get("until"), eos=None)
                out.append(postprocess_generated_text(completions[context], until, None))
            return out

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            raise AssertionError("a generate_until task asked for log-likelihoods")

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            raise AssertionError("a generate_until task asked for log-likelihoods")

    return CannedLM()


def lm_eval_samples(tasks: list, task_manager, completions: dict[str, str]) -> list[dict]:
    """lm_eval.simple_evaluate's logged samples (one per doc and filter) for these completions."""
    import logging

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    results = lm_eval.simple_evaluate(model=canned_model(completions), tasks=tasks, task_manager=task_manager,
                                      log_samples=True, bootstrap_iters=0)
    (samples,) = results["samples"].values()
    return samples


def imported_items(domain) -> list[dict]:
    """Every item of the domain (both splits), with its sample dict as training passes it."""
    return [*domain.samples("eval", 10_000, 0), *domain.samples("train", 10_000, 0)]


def docs_by_index(domain) -> dict[int, dict]:
    """The items of the task's test docs, by doc index (lm-eval's doc_id)."""
    return {s["metadata"]["doc_index"]: s for s in imported_items(domain) if s["metadata"]["lm_eval_docs"] == "test"}


def compare(domain, variants: dict, answer_of, wrong_of, lm_eval_run, filter_name: str) -> dict[str, list[float]]:
    """For each variant, the completions of every test doc scored by lm-eval and by the domain: identical
    per item (asserted); returns the domain's scores by variant."""
    docs = docs_by_index(domain)
    by_variant = {}
    for variant, make in variants.items():
        completions = {s["prompt"]: make(answer_of(s), wrong_of(s)) for s in docs.values()}
        samples = [s for s in lm_eval_run(completions) if s["filter"] == filter_name]
        assert sorted(s["doc_id"] for s in samples) == sorted(docs), "lm-eval evaluated other docs"
        theirs = {s["doc_id"]: float(s["exact_match"]) for s in samples}
        prompts = {s["doc_id"]: s["arguments"][0][0] for s in samples}
        order = sorted(docs)
        ours = domain.safe_score_many([completions[docs[i]["prompt"]] for i in order], [docs[i] for i in order])
        assert all(prompts[i] == docs[i]["prompt"] for i in order), "the imported prompt is not lm-eval's context"
        assert dict(zip(order, ours)) == theirs, f"{variant}: lm-eval {theirs} vs the domain {dict(zip(order, ours))}"
        by_variant[variant] = ours
    return by_variant


# -- the example task (examples/environments/lm_eval) --------------------------------------------------


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lm_eval_home")


@pytest.fixture(scope="module")
def arith(home):
    result = import_environment("lm-eval", str(EXAMPLE), name="arith_words_lm_eval", home=home)
    return result, environment_domain(result.folder)


def _arith_answer(sample):
    return sample["metadata"]["target"].split(": ", 1)[1]


def _arith_wrong(sample):
    answer = _arith_answer(sample)
    return str(int(answer) + 1) if answer.lstrip("-").isdigit() else ("Tuesday" if answer != "Tuesday" else "red")


ARITH_VARIANTS = {
    "worked_then_answer": lambda a, w: f"6 * 9 = 54, minus what was sold.\nAnswer: {a}",
    "shouted": lambda a, w: f"ANSWER: {a.upper()}",  # ignore_case
    "spaced_with_period": lambda a, w: f"answer:   {a}.",
    "right_then_next_question": lambda a, w: f"Answer: {a}\n\nQuestion: and then? Answer: {w}",  # until cuts
    "answer_after_stop_sequence": lambda a, w: f"Hmm.\n\nQuestion: Answer: {a}",  # cut before the answer
    "wrong": lambda a, w: f"Answer: {w}",
    "wrong_then_right": lambda a, w: f"Answer: {w}\nAnswer: {a}",  # the regex's first match decides
    "bare_value": lambda a, w: a,  # no answer line: the filter's fallback
    "empty": lambda a, w: "",
}
ARITH_EXPECTED = {"worked_then_answer": 1.0, "shouted": 1.0, "spaced_with_period": 1.0,
                  "right_then_next_question": 1.0, "answer_after_stop_sequence": 0.0, "wrong": 0.0,
                  "wrong_then_right": 0.0, "bare_value": 0.0, "empty": 0.0}


def test_example_scores_like_lm_eval_item_for_item(arith, monkeypatch):
    _, domain = arith
    from lm_eval.tasks import TaskManager

    # lm-eval resolves the YAML's relative data_files against the directory it runs in
    monkeypatch.chdir(EXAMPLE.parent)
    manager = TaskManager(include_path=str(EXAMPLE.parent), include_defaults=False)
    scores = compare(domain, ARITH_VARIANTS, _arith_answer, _arith_wrong,
                     lambda completions: lm_eval_samples(["arith_words"], manager, completions), "answer-line")
    assert {variant: set(values) for variant, values in scores.items()} == \
        {variant: {expected} for variant, expected in ARITH_EXPECTED.items()}
    assert sum(len(v) for v in scores.values()) == 9 * 20


def test_example_import_keeps_ids_files_and_the_source_split(arith, home):
    result, domain = arith
    items = imported_items(domain)
    assert len(items) == 32 and {s["id"] for s in items} >= {"ws-01", "wt-12"}  # the docs' own ids
    assert sorted(p.relative_to(result.folder / "source").as_posix()
                  for p in (result.folder / "source").rglob("*") if p.is_file()) == \
        ["data/test/0-arith_words_test.jsonl", "data/train/0-arith_words_train.jsonl", "task/_arith_template.yaml",
         "task/arith_words.yaml", "task/utils.py"]
    first = next(s for s in items if s["id"] == "ws-01")
    assert first["prompt"].startswith("Question: A baker fills 6 trays") and "the word Answer" in first["prompt"]
    assert first["answer"] == "Answer: 37" and domain.safe_score_many([first["answer"]], [first]) == [1.0]
    by_source = import_environment("lm-eval", str(EXAMPLE), name="arith_by_source", split_from="source", home=home)
    assert by_source.counts == {"train": 12, "eval": 20}


# -- a task YAML shipped with lm-eval, over local data in its dataset's format --------------------------


@pytest.fixture(scope="module")
def gsm8k(home):
    domains = {}
    for filter_name in ("strict-match", "flexible-extract"):
        name = f"gsm8k_local_{filter_name.replace('-', '_')}"
        result = import_environment("lm-eval", PACKAGED_GSM8K, name=name, home=home,
                                    options={"arguments": {"data_files": GSM8K_FILES, "filter": filter_name}})
        domains[filter_name] = (result, environment_domain(result.folder))
    return domains


def _gsm8k_answer(sample):
    return sample["metadata"]["target"].split("####")[-1].strip()


def _gsm8k_wrong(sample):
    return str(int(_gsm8k_answer(sample).replace(",", "")) + 7)


GSM8K_VARIANTS = {
    "reference_solution": lambda a, w: f"We add it up.\n#### {a}",
    "marker_without_commas": lambda a, w: f"#### {a.replace(',', '')}",
    "dollar_and_period": lambda a, w: f"So ${a.replace(',', '')}.",
    "the_answer_is": lambda a, w: f"First {w} then the answer is {a}.",  # flexible: the last number
    "decimal": lambda a, w: f"#### {a.replace(',', '')}.0",
    "cut_at_next_question": lambda a, w: f"#### {a}\n\nQuestion: next? #### {w}",
    "wrong": lambda a, w: f"#### {w}",
    "empty": lambda a, w: "",
}


@pytest.mark.parametrize("filter_name", ["strict-match", "flexible-extract"])
def test_packaged_gsm8k_scores_like_lm_eval_with_local_data(gsm8k, filter_name):
    """lm-eval's gsm8k.yaml from site-packages (5-shot from the train split, two filters), its hub dataset
    replaced by our own rows in GSM8K's format: prompts (with the 5 sampled shots) and scores match."""
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._yaml_loader import load_yaml

    from domains.importers.lm_eval_task import resolve_yaml

    result, domain = gsm8k[filter_name]
    config = load_yaml(resolve_yaml(PACKAGED_GSM8K, None), resolve_func=True)
    config.update(dataset_path="json", dataset_name=None, dataset_kwargs={"data_files": GSM8K_FILES})
    manager = TaskManager(include_defaults=False)
    scores = compare(domain, GSM8K_VARIANTS, _gsm8k_answer, _gsm8k_wrong,
                     lambda completions: lm_eval_samples([dict(config)], manager, completions), filter_name)
    assert set(scores["reference_solution"]) == {1.0} and set(scores["wrong"]) == set(scores["empty"]) == {0.0}
    assert set(scores["the_answer_is"]) == ({0.0} if filter_name == "strict-match" else {1.0})
    assert any("5-shot" in note for note in result.notes)
    assert docs_by_index(domain)[0]["prompt"].count("Question:") == 6  # five shots and the doc


# -- refusals --------------------------------------------------------------------------------------------


REFUSALS = [
    (FIXTURES / "shapes_multiple_choice.yaml", {}, ["output_type 'multiple_choice'", "generated answer",
                                                    "shapes_gen"]),
    ("lm_eval:arc/arc_easy.yaml", {}, ["output_type 'multiple_choice'", "arc_challenge_chat"]),
    (FIXTURES / "hub_dataset.yaml", {}, ["data only on a hub", "example-org/word-problems", "--arg data_files"]),
    (FIXTURES / "bleu_metric.yaml", {}, ["metric bleu", "only exact_match"]),
    (PACKAGED_GSM8K, {}, ["data only on a hub", "openai/gsm8k"]),
    (PACKAGED_GSM8K, {"data_files": GSM8K_FILES["test"]}, ["fewshot from a hub split", "'train'",
                                                           "num_fewshot=0"]),
    ("lm_eval:gsm8k/gsm8k-cot-self-consistency.yaml", {}, ["repeats: 64"]),
    (EXAMPLE, {"temperature": 0.5}, ["--arg temperature", "not a field"]),
    (FIXTURES, {}, ["holds 4 tasks", "--task NAME"]),
]


@pytest.mark.parametrize("source, arguments, expected", REFUSALS,
                         ids=["multiple_choice", "packaged_multiple_choice", "hub_dataset", "bleu", "packaged_hub",
                              "fewshot_from_hub_split", "repeats", "unknown_argument", "folder_without_task"])
def test_refused_by_name_and_nothing_written(source, arguments, expected, assay_home):
    with pytest.raises(ImportRefused) as refused:
        import_environment("lm-eval", str(source), name="refused", options={"arguments": arguments})
    for text in expected:
        assert text in str(refused.value), (text, str(refused.value))
    root = environments_root(assay_home)
    assert not root.exists() or not any(root.iterdir())


def test_cli_refusal_is_one_line_without_traceback(assay_home):
    out = run_cli("domains", "import", "lm-eval", str(FIXTURES / "shapes_multiple_choice.yaml"))
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "assay: error: task 'shapes_mc': output_type 'multiple_choice'" in out.stderr
    assert not (assay_home / "environments").exists() or not any((assay_home / "environments").iterdir())


def test_folder_with_task_picks_that_task(assay_home):
    result = import_environment("lm-eval", str(FIXTURES), name="shapes", options={"task": "shapes_gen"})
    domain = environment_domain(result.folder)
    items = imported_items(domain)
    assert len(items) == 4
    sample = next(s for s in items if s["id"] == "s3")
    assert domain.safe_score_many(["Six.\nmore", "Eight", "six"], [sample] * 3) == [1.0, 0.0, 1.0]


# -- persistence: a new process ------------------------------------------------------------------------


def test_new_process_lists_checks_and_refuses_an_edited_copy(arith, home, tmp_path):
    result, _ = arith
    env = user_shell(home)
    listed = subprocess.run(["assay", "domains", "list", "--json"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
    assert listed.returncode == 0, listed.stderr
    row = next(d for d in json.loads(listed.stdout) if d["name"] == "arith_words_lm_eval")
    assert "imported" in row["tags"] and "lm-eval" in row["tags"]
    checked = subprocess.run(["assay", "domains", "check", "arith_words_lm_eval"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0 and "PASS  arith_words_lm_eval" in checked.stdout, checked.stdout + checked.stderr
    assert "INFO" not in checked.stdout and "WARNING" not in checked.stdout  # lm-eval's logging kept off stdout

    edited_home = tmp_path / "edited"
    shutil.copytree(home, edited_home)
    copied_yaml = edited_home / "environments" / "arith_words_lm_eval" / "source" / "task" / "_arith_template.yaml"
    copied_yaml.write_text(copied_yaml.read_text().replace("ignore_case: true", "ignore_case: false"))
    refused = subprocess.run(["assay", "domains", "check", "arith_words_lm_eval"], cwd=REPO,
                             env=user_shell(edited_home), capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0
    assert "changed after it was imported" in refused.stdout + refused.stderr


def test_importer_module_does_not_import_lm_eval():
    code = ("import sys, domains.importers.lm_eval_task, domains.importers.environments as e; "
            "e.importer('lm-eval'); print('lm_eval' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
