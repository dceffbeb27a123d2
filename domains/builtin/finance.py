"""Time-value-of-money questions (FV, PV, loan payments, NPV, IRR, compound interest).

Each question is generated with random but realistic figures, computed with the closed-form
formula and checked against ``numpy-financial``; an item where the two disagree is dropped, so
every reference answer is verified twice. Answers are amounts rounded to cents (IRR: a
percentage with two decimals). Scoring reads the completion's final number ("$7,835.42",
"12.5%" and "Answer: 1234.5" all parse) and accepts it within a relative tolerance of 0.1%
(or 1 cent), enough for answers computed with rounded intermediate factors.
"""

from __future__ import annotations

import math
import random

from domains import Domain
from domains.builtin._common import NUMBER_HINT, draws_from, score_number, stream_split

OWNER = "finance-team@assay.dev"
REL_TOL = 1e-3
ABS_TOL = 0.01
SUFFIX = " Round to two decimals. " + NUMBER_HINT
COMPOUNDING = {1: "annually", 4: "quarterly", 12: "monthly"}
KINDS = ("fv", "compound_interest", "pv", "pmt", "npv", "irr")


def _money(rng: random.Random, low: int, high: int, step: int) -> int:
    return rng.randrange(low, high + 1, step)


def _rate(rng: random.Random, low: float = 1.0, high: float = 12.0) -> float:
    return round(rng.uniform(low, high) * 4) / 4  # quarter-percent steps: 4.25%


def _agree(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def make_question(rng: random.Random) -> dict | None:
    """One question, or None when numpy-financial disagrees with the closed form (never seen)."""
    import numpy_financial as npf

    kind = rng.choice(KINDS)
    if kind in ("fv", "compound_interest"):
        principal, rate, years = _money(rng, 500, 50_000, 100), _rate(rng), rng.randint(1, 30)
        m = rng.choice(list(COMPOUNDING))
        value = principal * (1 + rate / 100 / m) ** (years * m)
        if not _agree(value, float(npf.fv(rate / 100 / m, years * m, 0, -principal))):
            return None
        if kind == "fv":
            question = (f"You deposit ${principal:,} at {rate}% annual interest compounded "
                        f"{COMPOUNDING[m]}. What is the balance after {years} years?")
        else:
            value -= principal
            question = (f"How much interest does ${principal:,} earn in {years} years at {rate}% "
                        f"annual interest compounded {COMPOUNDING[m]}?")
    elif kind == "pv":
        target, rate, years = _money(rng, 1_000, 200_000, 500), _rate(rng), rng.randint(1, 40)
        value = target / (1 + rate / 100) ** years
        if not _agree(value, float(npf.pv(rate / 100, years, 0, -target))):
            return None
        question = (f"How much must you invest today at {rate}% annual interest, compounded "
                    f"annually, to have ${target:,} in {years} years?")
    elif kind == "pmt":
        loan, rate, years = _money(rng, 5_000, 500_000, 1_000), _rate(rng, 2.0, 9.0), rng.choice([3, 5, 10, 15, 20, 30])
        i, count = rate / 100 / 12, years * 12
        value = loan * i / (1 - (1 + i) ** -count)
        if not _agree(value, float(-npf.pmt(i, count, loan))):
            return None
        question = (f"A loan of ${loan:,} at {rate}% annual interest is repaid in equal monthly "
                    f"payments over {years} years. What is the monthly payment?")
    elif kind == "npv":
        outlay, rate = _money(rng, 1_000, 100_000, 500), _rate(rng, 2.0, 15.0)
        flows = [_money(rng, 100, max(200, outlay // 2), 50) for _ in range(rng.randint(3, 6))]
        value = -outlay + sum(cf / (1 + rate / 100) ** t for t, cf in enumerate(flows, start=1))
        if not _agree(value, float(npf.npv(rate / 100, [-outlay] + flows))):
            return None
        listed = ", ".join(f"${cf:,}" for cf in flows)
        question = (f"A project costs ${outlay:,} today and returns {listed} at the end of years "
                    f"1 to {len(flows)}. At a discount rate of {rate}%, what is its net present value?")
    else:  # irr
        outlay = _money(rng, 1_000, 100_000, 500)
        flows = [_money(rng, max(100, outlay // 8), max(200, outlay // 2), 50) for _ in range(rng.randint(3, 6))]
        if sum(flows) <= outlay:
            flows[-1] += outlay - sum(flows) + _money(rng, 100, 5_000, 100)
        irr = float(npf.irr([-outlay] + flows))
        if not math.isfinite(irr):
            return None
        residual = -outlay + sum(cf / (1 + irr) ** t for t, cf in enumerate(flows, start=1))
        if abs(residual) > 1e-6 * outlay:
            return None
        value = irr * 100
        listed = ", ".join(f"${cf:,}" for cf in flows)
        question = (f"An investment of ${outlay:,} returns {listed} at the end of years 1 to "
                    f"{len(flows)}. What is its internal rate of return, in percent?")
    return {"prompt": question + SUFFIX, "answer": f"{value:.2f}", "metadata": {"kind": kind}}


def _draws(split: str, seed: int):
    for item in draws_from(make_question, "finance", split, seed):
        if item is not None:
            yield item


def samples(split: str, n: int, seed: int):
    yield from stream_split("finance", split, n, seed, _draws(split, seed), eval_share=0.5)


def score(completion: str, sample: dict) -> float:
    return score_number(completion, sample.get("answer", ""), rel_tol=REL_TOL, abs_tol=ABS_TOL)


DOMAIN = Domain(
    name="finance",
    owner=OWNER,
    description="Time value of money: future/present value, loan payments, NPV, IRR and compound "
                "interest, verified with numpy-financial; numeric answers within 0.1%",
    tags=("finance", "math"),
    samples=samples,
    score=score,
    answer_pattern=r"-?\d+\.\d{2}",
)
