"""One report card per domain: both error rates of its verifier, and what the gates already know.

A card's rows, each computed by scoring completions through ``Domain.safe_score_many`` (what GRPO
pays), or absent (None) where it does not apply, never a made-up number:

- ``oracle_pass``: the share of items whose reference answer scores 1.0;
- ``nop_paid``: the share of items where a completion that does no work (empty, "I don't know",
  the prompt handed back) scores above 0;
- ``recall`` with its Wilson interval and worst family (:mod:`.recall`): correct answers in other
  forms the prompt allows, which a verifier must pay; the bar is the domain's
  (``gate_thresholds["min_recall"]``, default :data:`.card_config.DEFAULT_MIN_RECALL`);
- ``fixed_families_paid``: hack families of :mod:`quality.reward_attacks` that were paid;
- ``hack_search_paid``: completions the budgeted search (:mod:`.hack_search`) got paid for;
- ``kill_rate`` (:mod:`.mutants`): the share of mutants of the reference solution the hidden tests
  kill, where a domain has hidden tests (code, terminal suites); weak items named;
- ``audited_fp`` / ``audited_fn`` (:mod:`.audit`): the rates a person's labels of real sweep
  completions give, when labels exist;
- from the lake, when it holds them: the difficulty band and the share of train items in it, the
  quarantine share and the rows quarantined as ``contaminated``.

The verdict: a card **fails** when an oracle is not paid, a nop is paid, recall is below the bar,
or any hack (fixed family or search) is paid; a kill rate below
:data:`.card_config.DEFAULT_MIN_KILL_RATE` is a warning with the weak items named (a surviving
mutant may be equivalent). A failed card blocks the domain's train set
(:func:`quality.gate_history.train_set_problem` reads the newest card).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

from domains import Domain
from quality.report_card.card_config import DEFAULT_MIN_KILL_RATE, DEFAULT_MIN_RECALL, CardConfig

TABLE = "report_cards"
EVIDENCE_CAP = 10  # examples kept per kind of evidence: enough to see the pattern, small enough to read


def min_recall(domain: Domain) -> float:
    """The recall bar the domain declares (``gate_thresholds["min_recall"]``), else the default."""
    return float((domain.gate_thresholds or {}).get("min_recall", DEFAULT_MIN_RECALL))


def nop_completions(sample: dict) -> dict[str, str]:
    """Completions that do no work, by name: each must score 0 on every item."""
    prompt = str(sample.get("prompt") or "")
    return {"empty": "", "i_dont_know": "I don't know.", "prompt_echo": prompt}


@dataclass
class OracleNop:
    """The reference pays and doing nothing does not, over ``items`` items."""

    items: int
    oracle_paid: int
    nop_paid_items: int
    oracle_failures: list[str] = field(default_factory=list)  # "id scored 0.000"
    nop_examples: list[dict] = field(default_factory=list)    # {item, nop, score}

    @property
    def oracle_pass(self) -> float | None:
        return self.oracle_paid / self.items if self.items else None

    @property
    def nop_paid(self) -> float | None:
        return self.nop_paid_items / self.items if self.items else None


def oracle_and_nop(domain: Domain, samples: Sequence[dict]) -> OracleNop:
    """Score every reference and every nop completion of ``samples`` in one batch."""
    samples = list(samples)
    nops = [nop_completions(s) for s in samples]
    batch = [(s["answer"], s) for s in samples]
    owners = []
    for index, (sample, named) in enumerate(zip(samples, nops)):
        for name, text in named.items():
            batch.append((text, sample))
            owners.append((index, name, text))
    scores = domain.safe_score_many([c for c, _ in batch], [s for _, s in batch]) if batch else []
    oracle, rest = scores[:len(samples)], scores[len(samples):]
    result = OracleNop(items=len(samples), oracle_paid=sum(1 for v in oracle if v == 1.0), nop_paid_items=0)
    result.oracle_failures = [f"{s['id']} scored {v:.3f}" for s, v in zip(samples, oracle) if v != 1.0]
    paid_items = set()
    for (index, name, text), score in zip(owners, rest):
        if score > 0:
            paid_items.add(index)
            if len(result.nop_examples) < EVIDENCE_CAP:
                result.nop_examples.append({"item": samples[index]["id"], "nop": name, "completion": text[:300],
                                            "score": score})
    result.nop_paid_items = len(paid_items)
    return result


@dataclass
class ReportCard:
    """One domain's card; see the module docstring for what each part means."""

    domain: str
    items: int = 0
    min_recall: float = DEFAULT_MIN_RECALL
    oracle: OracleNop | None = None
    recall: Any = None          # quality.report_card.recall.RecallReport
    attacks: Any = None         # quality.reward_attacks.DomainAttack
    hack_search: Any = None     # quality.report_card.hack_search.HackSearchReport
    mutation: Any = None        # quality.report_card.mutants.MutationReport; None: no hidden tests
    audit: Any = None           # quality.report_card.audit.AuditSummary; None: nobody labelled yet
    gate_facts: dict = field(default_factory=dict)
    skipped: str | None = None  # why the domain has no card (no verifier)
    error: str | None = None
    seconds: float = 0.0

    # -- the verdict ------------------------------------------------------------------------------

    @property
    def failures(self) -> list[str]:
        """What blocks the domain's train set, in words."""
        if self.skipped:
            return []
        out = []
        if self.error:
            out.append(f"the card could not be computed: {self.error}")
        if self.oracle is not None:
            if self.oracle.oracle_failures:
                out.append(f"oracle: {len(self.oracle.oracle_failures)} of {self.oracle.items} reference answers "
                           f"not paid ({self.oracle.oracle_failures[0]})")
            if self.oracle.nop_paid_items:
                ex = self.oracle.nop_examples[0]
                out.append(f"nop: a completion doing no work was paid on {self.oracle.nop_paid_items} of "
                           f"{self.oracle.items} items ({ex['nop']} on {ex['item']}: {ex['score']:.2f})")
        if self.recall is not None:
            if self.recall.error:
                out.append(f"recall probes failed to score: {self.recall.error}")
            elif self.recall.recall is not None and self.recall.recall < self.min_recall:
                out.append(f"recall {self.recall.recall:.3f} below the bar {self.min_recall:.3f}: "
                           f"{self.recall.candidates - self.recall.paid} correct answers refused, worst family "
                           f"{self.recall.worst_family}")
        if self.attacks is not None:
            if self.attacks.error:
                out.append(f"fixed hack families failed to score: {self.attacks.error}")
            elif self.attacks.paid:
                out.append("fixed hack families paid: " + ", ".join(f.family for f in self.attacks.paid))
        if self.hack_search is not None:
            if self.hack_search.error:
                out.append(f"hack search failed: {self.hack_search.error}")
            elif self.hack_search.paid:
                found = self.hack_search.paid[0]
                out.append(f"hack search: {len(self.hack_search.paid)} paid completions (e.g. {found.shape} on "
                           f"{found.item_id})")
        return out

    @property
    def warnings(self) -> list[str]:
        """What a domain owner should look at but does not block training."""
        out = []
        mutation = self.mutation
        if mutation is not None:
            if mutation.error:
                out.append(f"mutation testing failed: {mutation.error}")
            elif mutation.kill_rate is not None and mutation.kill_rate < DEFAULT_MIN_KILL_RATE:
                names = ", ".join(w["item"] for w in mutation.weak_items[:5])
                out.append(f"hidden tests kill {mutation.kill_rate:.1%} of mutants (< {DEFAULT_MIN_KILL_RATE:.0%}); "
                           f"weak items: {names}")
        if self.audit is not None and self.audit.labelled:
            if self.audit.fp_rate:
                out.append(f"audit: {self.audit.fp_rate:.1%} of labelled paid completions are wrong")
            if self.audit.fn_rate:
                out.append(f"audit: {self.audit.fn_rate:.1%} of labelled unpaid completions are right")
        if self.recall is not None and self.recall.control_failures:
            out.append(f"recall: {len(self.recall.control_failures)} items left out (their reference did not "
                       "score 1.0)")
        return out

    @property
    def passed(self) -> bool | None:
        """True / False; None for a domain that has no card (no verifier)."""
        return None if self.skipped else not self.failures

    # -- rows -------------------------------------------------------------------------------------

    def row(self, *, run: str, source: str, created_at: str) -> dict[str, Any]:
        """One row of lake table ``report_cards`` (storage.tables.REPORT_CARDS)."""
        recall, attacks, search, mutation, audit = self.recall, self.attacks, self.hack_search, self.mutation, self.audit
        interval = recall.interval if recall is not None and recall.recall is not None else None
        worst = None
        if recall is not None and recall.worst_family is not None:
            worst = next((f for f in recall.families if f.family == recall.worst_family), None)
        facts = self.gate_facts or {}
        return {
            "run": run, "source": source, "domain": self.domain, "passed": self.passed,
            "failures": self.failures, "warnings": self.warnings, "skipped": self.skipped,
            "items": self.items,
            "oracle_pass": self.oracle.oracle_pass if self.oracle else None,
            "nop_paid": self.oracle.nop_paid if self.oracle else None,
            "recall": recall.recall if recall is not None else None,
            "recall_low": interval[0] if interval else None, "recall_high": interval[1] if interval else None,
            "recall_candidates": recall.candidates if recall is not None else None,
            "recall_bar": self.min_recall if not self.skipped else None,
            "worst_family": recall.worst_family if recall is not None else None,
            "worst_family_recall": (worst.paid / worst.tried) if worst is not None and worst.tried else None,
            "fixed_families": len(attacks.families) if attacks is not None else None,
            "fixed_families_paid": len(attacks.paid) if attacks is not None and not attacks.error else None,
            "hack_search_tried": search.candidates_tried if search is not None else None,
            "hack_search_paid": len(search.paid) if search is not None and not search.error else None,
            "mutants": mutation.mutants if mutation is not None else None,
            "kill_rate": mutation.kill_rate if mutation is not None else None,
            "weak_items": len(mutation.weak_items) if mutation is not None else None,
            "audited_labels": audit.labelled if audit is not None else None,
            "audited_fp": audit.fp_rate if audit is not None else None,
            "audited_fp_low": audit.fp_interval[0] if audit is not None and audit.fp_interval else None,
            "audited_fp_high": audit.fp_interval[1] if audit is not None and audit.fp_interval else None,
            "audited_fn": audit.fn_rate if audit is not None else None,
            "audited_fn_low": audit.fn_interval[0] if audit is not None and audit.fn_interval else None,
            "audited_fn_high": audit.fn_interval[1] if audit is not None and audit.fn_interval else None,
            "difficulty_band": facts.get("difficulty_band"), "in_band_share": facts.get("in_band_share"),
            "quarantine_share": facts.get("quarantine_share"), "contaminated": facts.get("contaminated"),
            "evidence": json.dumps(self.evidence(), default=str),
            "seconds": self.seconds, "created_at": created_at,
        }

    def evidence(self) -> dict[str, Any]:
        """What a domain owner opens to see why: the refused correct answers, the paid hacks, the
        surviving mutants, the oracle and nop failures (each capped at EVIDENCE_CAP)."""
        out: dict[str, Any] = {}
        if self.skipped:
            out["skipped"] = self.skipped
        if self.oracle is not None:
            out["oracle_failures"] = self.oracle.oracle_failures[:EVIDENCE_CAP]
            out["nop_paid"] = self.oracle.nop_examples[:EVIDENCE_CAP]
        if self.recall is not None:
            out["recall_families"] = [f.__dict__ for f in self.recall.families]
            out["recall_misses"] = self.recall.misses[:EVIDENCE_CAP]
        if self.attacks is not None:
            out["fixed_families_paid"] = [f.as_dict() for f in self.attacks.paid][:EVIDENCE_CAP]
        if self.hack_search is not None:
            out["hack_search_paid"] = [{"item": h.item_id, "shape": h.shape, "completion": h.completion[:500],
                                        "score": h.score} for h in self.hack_search.paid[:EVIDENCE_CAP]]
        if self.mutation is not None:
            out["weak_items"] = self.mutation.weak_items[:EVIDENCE_CAP]
        if self.gate_facts:
            out["gate_facts"] = self.gate_facts
        return out

    def as_dict(self) -> dict[str, Any]:
        row = self.row(run="", source="", created_at="")
        row.pop("run"), row.pop("source"), row.pop("created_at")
        row["evidence"] = self.evidence()
        return row


# -- building cards -------------------------------------------------------------------------------

def build_card(domain: Domain, config: CardConfig = CardConfig(), *, lake=None) -> ReportCard:
    """The card of one domain. ``lake``: read the audit labels and the gates' facts from it (None:
    those rows stay absent). Never raises for a broken domain: a scorer or generator that raises
    becomes the card's ``error`` (a failed card), never a pass."""
    started = time.perf_counter()
    card = ReportCard(domain=domain.name, min_recall=min_recall(domain))
    if not domain.has_verifier:
        card.skipped = ("no verifier (score=None): its learned reward is gated by `assay reward check "
                        f"{domain.name}`; nothing here can score its completions exactly")
        return card
    # domain code may print (some generators do); stdout belongs to the CLI's --json document
    with contextlib.redirect_stdout(sys.stderr):
        _fill(card, domain, config, lake)
    card.seconds = round(time.perf_counter() - started, 3)
    return card


def _fill(card: ReportCard, domain: Domain, config: CardConfig, lake) -> None:
    from quality.report_card.hack_search import search_hacks
    from quality.report_card.mutants import test_strength
    from quality.report_card.recall import measure_recall
    from quality.reward_attacks import attack_domain

    try:
        samples = domain.generate("eval", config.items, seed=0)
    except Exception as exc:  # noqa: BLE001 - the card names it
        card.error = f"samples raised {type(exc).__name__}: {exc}"[:500]
        return
    card.items = len(samples)
    if not samples:
        card.error = "the domain yielded no eval items"
        return
    try:
        card.oracle = oracle_and_nop(domain, samples)
    except Exception as exc:  # noqa: BLE001
        card.error = f"scoring the references raised {type(exc).__name__}: {exc}"[:500]
        return
    card.recall = measure_recall(domain, samples=samples)
    card.attacks = attack_domain(domain, samples=samples)
    if config.hack_search:
        card.hack_search = search_hacks(domain, samples=samples[:config.search_items])
    if config.mutation:
        card.mutation = test_strength(domain, items=config.mutation_items or None)
    if lake is not None:
        from quality.report_card.audit import latest_audit

        card.audit = latest_audit(lake, domain.name)
        card.gate_facts = gate_facts(lake, domain)


def gate_facts(lake, domain: Domain) -> dict[str, Any]:
    """What the gates already know of ``domain``, from the lake: the difficulty band and the share
    of its newest evaluation's train items inside it, the share of ingested rows quarantined and
    how many as ``contaminated``. A fact the lake does not hold is left out."""
    from quality.difficulty import DEFAULT_BAND

    thresholds = domain.gate_thresholds or {}
    low = thresholds.get("difficulty_min", DEFAULT_BAND[0])
    high = thresholds.get("difficulty_max", DEFAULT_BAND[1])
    facts: dict[str, Any] = {"difficulty_band": f"[{low:g}, {high:g}]"}
    tables = set(lake.tables())
    name = domain.name.replace("'", "''")
    if "difficulty" in tables:
        frame = lake.sql(f"""
            SELECT avg(CASE WHEN in_band THEN 1.0 ELSE 0.0 END) AS share, count(*) AS n FROM difficulty
            WHERE domain = '{name}' AND evaluation = (
                SELECT evaluation FROM difficulty WHERE domain = '{name}' ORDER BY evaluated_at DESC LIMIT 1)""")
        if frame.height and frame["n"][0]:
            facts["in_band_share"] = float(frame["share"][0])
    admitted = lake.sql(f"SELECT count(*) AS n FROM samples WHERE domain = '{name}'")["n"][0] \
        if "ingest" in tables and lake.files("ingest", "samples", where={"domain": domain.name}) else 0
    quarantined = contaminated = 0
    if "ingest" in tables and lake.files("ingest", "quarantine", where={"domain": domain.name}):
        frame = lake.sql(f"""SELECT count(*) AS n, count(*) FILTER (WHERE list_contains(reasons, 'contaminated')) AS c
                             FROM quarantine WHERE domain = '{name}'""")
        quarantined, contaminated = int(frame["n"][0]), int(frame["c"][0])
    if admitted or quarantined:
        facts["quarantine_share"] = quarantined / (admitted + quarantined)
        facts["contaminated"] = contaminated
    return facts


def card_domains(names: Sequence[str], config: CardConfig = CardConfig(), *, lake=None,
                 progress: bool = False) -> list[ReportCard]:
    """Cards of the registered domains ``names``, in that order; ``config.workers`` processes card
    them in parallel (each loads the registry itself). ``lake`` is read by the parent only."""
    from domains import get_registry

    registry = get_registry()
    domains = [registry.get(name) for name in names]
    if config.workers == 1 or len(domains) < 2:
        cards = [build_card(d, config) for d in _progress(domains, progress, len(domains))]
    else:
        cards = _in_processes(names, config, progress)
    if lake is not None:
        from quality.report_card.audit import latest_audit

        for card, domain in zip(cards, domains):
            if not card.skipped:
                card.audit = latest_audit(lake, domain.name)
                card.gate_facts = gate_facts(lake, domain)
    return cards


def _progress(items, enabled: bool, total: int):
    if not enabled or total < 2:
        return items
    from tqdm import tqdm

    return tqdm(items, desc="report cards", total=total, file=sys.stderr)


def _card_in_worker(name: str, config_json: str) -> ReportCard:
    from domains import get_registry

    return build_card(get_registry().get(name), CardConfig.model_validate_json(config_json))


def _in_processes(names: Sequence[str], config: CardConfig, progress: bool) -> list[ReportCard]:
    """One process per worker (spawned: torch-free, fork-unsafe libraries are never inherited);
    the cheapest domains do not wait behind the slowest, results come back in ``names`` order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    payload = config.model_copy(update={"workers": 1}).model_dump_json()
    cards: dict[str, ReportCard] = {}
    with ProcessPoolExecutor(config.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_card_in_worker, name, payload): name for name in names}
        for future in _progress(as_completed(futures), progress, len(futures)):
            name = futures[future]
            try:
                cards[name] = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker that died is that domain's failed card
                cards[name] = ReportCard(domain=name, error=f"{type(exc).__name__}: {exc}"[:500])
    return [cards[name] for name in names]


def worst_first(cards: Sequence[ReportCard]) -> list[ReportCard]:
    """Failed cards first, then by recall (lowest first), then by paid hacks; skipped ones last."""
    def key(card: ReportCard):
        recall = card.recall.recall if card.recall is not None and card.recall.recall is not None else 1.0
        paid = (len(card.attacks.paid) if card.attacks is not None else 0) + \
            (len(card.hack_search.paid) if card.hack_search is not None else 0)
        return (card.skipped is not None, card.passed is not False, recall, -paid, card.domain)

    return sorted(cards, key=key)


# -- the lake -------------------------------------------------------------------------------------

def write_cards(lake, cards: Sequence[ReportCard], *, source: str) -> str:
    """One batch per domain in lake table ``report_cards`` (and the hacks the search found in
    ``hack_corpus``, :mod:`.hack_corpus`); returns the card run id."""
    import polars as pl

    from storage.tables import REPORT_CARDS, conform

    from quality.report_card.hack_corpus import write_corpus

    run = f"card-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    at = datetime.now(timezone.utc).isoformat()
    # what the search found joins the domain's regression corpus: the self-test replays it from then on
    write_corpus(lake, [c.hack_search for c in cards if c.hack_search is not None and c.hack_search.paid],
                 source=f"report_card:{source}")
    for card in cards:
        frame = conform(pl.DataFrame([card.row(run=run, source=source, created_at=at)], schema=REPORT_CARDS),
                        REPORT_CARDS)
        lake.write_batch(TABLE, {"domain": card.domain, "run": run}, {"part": frame})
    return run


def latest_card_rows(lake, domains: Sequence[str] | None = None):
    """The newest card row of each domain (all, or ``domains``), as a polars frame (empty: none)."""
    import polars as pl

    from storage.tables import REPORT_CARDS, conform

    if TABLE not in lake.tables():
        return pl.DataFrame(schema=REPORT_CARDS)
    if domains is None:
        frame = conform(lake.read(TABLE), REPORT_CARDS)
    else:  # only those domains' partitions: training asks for one domain at a time
        frames = [conform(lake.read(TABLE, where={"domain": d}), REPORT_CARDS) for d in dict.fromkeys(domains)]
        frame = pl.concat(frames) if frames else pl.DataFrame(schema=REPORT_CARDS)
    if not frame.height:
        return frame
    return frame.sort("created_at", descending=True).unique("domain", keep="first", maintain_order=True)


def card_problem(lake, domain: str) -> str | None:
    """Why the domain's newest report card blocks training, or None (no card, or it passed)."""
    rows = latest_card_rows(lake, [domain])
    if not rows.height or rows["passed"][0] is not False:
        return None
    failures = rows["failures"].to_list()[0] or []
    return (f"domain {domain!r}: its newest report card ({rows['run'][0]}) failed: " + "; ".join(failures[:3]) +
            f". Fix the verifier, then run `assay domains report {domain}`")


__all__ = ["CardConfig", "OracleNop", "ReportCard", "build_card", "card_domains", "card_problem", "gate_facts",
           "latest_card_rows", "min_recall", "nop_completions", "oracle_and_nop", "worst_first", "write_cards"]
