"""The promotion policy: one typed config, edited in one file, that decides what blocks a checkpoint.

Where it comes from (first found wins, the whole file is the policy; unset fields take the
defaults below, which are also what the shipped ``evaluation/promotion_policy.yaml`` says):

1. a path given explicitly (``assay regress --policy``, the Dagster config ``policy_path``);
2. ``$ASSAY_HOME/promotion.yaml`` (the team's file);
3. ``evaluation/promotion_policy.yaml`` shipped with the repo.

The file is validated when read; an error names the file, the field and how to fix it.

What it decides (:func:`blocking_reasons`, used by the promotion, the Dagster check and
``assay regress``'s exit code), and when a candidate that nothing blocks is promoted
(``promote_when``, :func:`promotion_rule`):

- ``promote_when: no_regression``: promote when nothing blocks, whether or not any domain improved
  (a candidate that is only "not worse" replaces the champion); ``improvement``: promote only when,
  in addition, at least one domain *improved with evidence* against the champion: the 95% CI of its
  paired change lies above 0 (:func:`improved_domains`). A gain whose CI includes 0, e.g. +20.8
  points on a sweep whose MDE is 36.8, is noise at this sample size, never evidence. The rule in
  force is printed beside every verdict.

- ``block_on: protected``: only a protected domain's regression blocks (Holm-corrected over the
  protected domains, one-sided, beyond its margin); ``any``: in addition, a significant drop in
  any domain (Benjamini-Hochberg at ``q``) blocks.
- ``on_underpowered: refuse``: a domain that could block (a protected one; any one under
  ``block_on: any``) but whose test cannot reject at ``alpha`` (verdict ``underpowered``, see
  :mod:`evaluation.regression`) blocks too: a gate that cannot see a regression must not pass one.
  ``allow`` lets it through (named in the reason as unchecked).
- ``refuse_not_comparable``: a domain the two checkpoints were swept on under different
  generation configs blocks (:mod:`evaluation.comparability`).
- ``refuse_missing_protected``: a protected domain that one side swept and the other did not.

``protected`` (unset: the domains the registry marks ``protected=True``), ``default_margin``,
``margins``, ``alpha`` and ``q`` feed :func:`evaluation.regression.compare_results`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from storage.errors import UserError

POLICY_FILE = "promotion.yaml"
SHIPPED_POLICY = Path(__file__).with_name("promotion_policy.yaml")


class PolicyError(UserError, ValueError):
    """The promotion policy file is unreadable or invalid (the message says how to fix it)."""


class PromotionPolicy(BaseModel):
    """What blocks a candidate from becoming the champion."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protected: list[str] | Literal["all"] | None = Field(
        default=None,
        description="Domains whose regressions block promotion (Holm-corrected). Unset: the domains the "
                    "registry marks protected=True; 'all': every domain; a list replaces the registry's choice.")
    default_margin: float = Field(
        default=0.01, ge=0, lt=1,
        description="Non-inferiority margin in score units (0.01 = one point): a drop smaller than this is "
                    "never a regression.")
    margins: dict[str, float] = Field(
        default_factory=dict, description="Per-domain margins overriding default_margin, e.g. {gsm_symbolic: 0.02}.")
    alpha: float = Field(
        default=0.05, gt=0, lt=1,
        description="One-sided level of each domain's test and the Holm family-wise level over protected "
                    "domains; a test whose smallest attainable p exceeds it is 'underpowered'.")
    q: float = Field(default=0.05, gt=0, lt=1,
                     description="Benjamini-Hochberg false discovery rate across domains (warnings).")
    block_on: Literal["protected", "any"] = Field(
        default="protected",
        description="'protected': only Holm-corrected regressions of protected domains block; 'any': a "
                    "BH-significant drop in any domain blocks too.")
    on_underpowered: Literal["refuse", "allow"] = Field(
        default="refuse",
        description="A domain that could block but whose test cannot reject at alpha: 'refuse' blocks (it "
                    "cannot show it did not regress), 'allow' promotes and names it as unchecked.")
    refuse_not_comparable: bool = Field(
        default=True,
        description="Refuse when a domain was swept under different generation configs on the two sides.")
    refuse_missing_protected: bool = Field(
        default=True,
        description="Refuse when a protected domain has results on one side only.")
    promote_when: Literal["no_regression", "improvement"] = Field(
        default="no_regression",
        description="'no_regression': promote when nothing blocks, even if no domain improved; 'improvement': "
                    "promote only when nothing blocks and at least one domain improved with evidence (the 95% CI "
                    "of its change vs the champion lies above 0).")

    @field_validator("margins")
    @classmethod
    def _margins_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        for name, margin in value.items():
            if not 0 <= margin < 1:
                raise ValueError(f"margin {margin} for {name!r} is outside [0, 1): use score units (0.01 = one point)")
        return value

    @field_validator("protected", mode="before")
    @classmethod
    def _protected_shape(cls, value):
        if isinstance(value, str) and value != "all":
            raise ValueError(f"write a list of domain names (e.g. [{value}]), 'all', or leave it unset")
        return value

    @field_validator("protected")
    @classmethod
    def _protected_names(cls, value):
        if isinstance(value, list):
            bad = [v for v in value if not v.strip()]
            if bad or len(set(value)) != len(value):
                raise ValueError("list each protected domain once, by its registered name")
        return value

    # -- resolution against the registry -------------------------------------------------------

    def protected_domains(self, registry_protected: Iterable[str], domains: Iterable[str]) -> set[str]:
        """The protected set: the policy's list, every domain ('all'), or the registry's."""
        if self.protected == "all":
            return set(domains)
        if self.protected is None:
            return set(registry_protected)
        return set(self.protected)

    def check_domains(self, known: Iterable[str], source: str) -> None:
        """Refuse names the registry does not know (a typo would silently protect nothing)."""
        known = set(known)
        named = (set(self.protected) if isinstance(self.protected, list) else set()) | set(self.margins)
        unknown = sorted(named - known)
        if unknown:
            raise PolicyError(f"promotion policy {source}: unknown domain(s) {', '.join(map(repr, unknown))} "
                              f"in protected/margins (known: {', '.join(sorted(known)) or 'none'}); fix the name "
                              "or remove it")

    def margin_by_domain(self, domains: Iterable[str]) -> dict[str, float]:
        return {d: self.margins.get(d, self.default_margin) for d in domains}

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


class PromotionSettings(BaseModel):
    """What the regression report and the promotion compare against, under which policy file
    (the config of ``regression_report`` and ``champion_promotion``: both must agree)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    anchor: str = Field("", description="a fixed anchor checkpoint id also compared against, catching slow drift "
                                        "(empty: none)")
    policy_path: str = Field("", description=f"the promotion policy file (empty: $ASSAY_HOME/{POLICY_FILE}, else "
                                             "the shipped default)")

    @field_validator("anchor", "policy_path")
    @classmethod
    def _no_stray_spaces(cls, value, info):
        if value != value.strip():
            raise ValueError(f"{info.field_name} {value!r} has leading or trailing spaces; remove them")
        return value


@dataclass(frozen=True)
class ActivePolicy:
    """The policy in force and the file it came from."""

    policy: PromotionPolicy
    source: str

    def to_json(self) -> dict:
        return {"source": self.source, **self.policy.to_json()}

    def describe(self, protected: Iterable[str] | None = None) -> list[str]:
        """Short lines for a person (Dagster metadata, the dashboard, the CLI)."""
        p = self.policy
        names = sorted(protected) if protected is not None else None
        prot = (", ".join(names) or "none") if names is not None else (
            "registry's protected domains" if p.protected is None else
            "every domain" if p.protected == "all" else ", ".join(p.protected) or "none")
        block = ("Holm-corrected regressions of protected domains" if p.block_on == "protected" else
                 "any BH-significant drop, and Holm-corrected regressions of protected domains")
        margins = f"{100 * p.default_margin:g} pt(s)" + (
            " (" + ", ".join(f"{d}: {100 * m:g}" for d, m in sorted(p.margins.items())) + ")" if p.margins else "")
        return [f"source: {self.source}", f"promotes when: {promotion_rule(p)}", f"protected: {prot}",
                f"blocks on: {block}",
                f"margin: {margins}; alpha {p.alpha:g} (Holm, per test); q {p.q:g} (BH)",
                f"underpowered domain that could block: {p.on_underpowered}",
                f"not comparable (different generation configs): {'refuse' if p.refuse_not_comparable else 'ignore'}",
                f"protected domain missing on one side: {'refuse' if p.refuse_missing_protected else 'ignore'}"]


def _format_error(exc: ValidationError, source: str) -> str:
    fields = ", ".join(PromotionPolicy.model_fields)
    parts = []
    for err in exc.errors():
        where = str(err["loc"][0]) if err["loc"] else "(top level)"  # the field, not pydantic's union branch
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field {where!r} (known: {fields})")
        else:
            parts.append(f"{where}: {err['msg'].removeprefix('Value error, ')} (got {err.get('input')!r})")
    return f"promotion policy {source}: " + "; ".join(parts) + "; edit the file and try again"


def parse_policy(text: str, source: str) -> PromotionPolicy:
    """Parse and validate policy YAML; :class:`PolicyError` says what to fix."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise PolicyError(f"promotion policy {source}: not valid YAML{where} "
                          f"({getattr(exc, 'problem', None) or 'syntax error'}); fix the syntax") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"promotion policy {source}: expected a mapping of fields "
                          f"({', '.join(PromotionPolicy.model_fields)}), got {type(data).__name__}")
    try:
        return PromotionPolicy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(_format_error(exc, source)) from None


def policy_file(home: str | Path | None = None, path: str | Path | None = None) -> Path:
    """The file the active policy is read from (see the module docstring for the order)."""
    if path:
        p = Path(path).expanduser()
        if not p.is_file():
            raise PolicyError(f"promotion policy {p}: no such file; give an existing YAML file "
                              f"(or none, to use $ASSAY_HOME/{POLICY_FILE} or the shipped default)")
        return p
    if home is not None:
        team = Path(home) / POLICY_FILE
        if team.is_file():
            return team
    return SHIPPED_POLICY


def load_policy(home: str | Path | None = None, path: str | Path | None = None) -> ActivePolicy:
    """The active policy for ``home`` (ASSAY_HOME), or the file at ``path``."""
    source = policy_file(home, path)
    try:
        text = source.read_text()
    except OSError as exc:
        raise PolicyError(f"promotion policy {source}: cannot read it ({exc.strerror})") from None
    return ActivePolicy(parse_policy(text, str(source)), str(source))


# -- what blocks, and when a candidate is promoted ---------------------------------------------------

PROMOTION_RULES = {
    "no_regression": "promote when nothing regressed, no improvement required",
    "improvement": "promote only when a domain improved with evidence and nothing regressed",
}


def promotion_rule(policy: PromotionPolicy) -> str:
    """The rule in force, as printed beside a verdict: ``promote_when: <setting> = <meaning>``."""
    return f"promote_when: {policy.promote_when} = {PROMOTION_RULES[policy.promote_when]}"


def improved_domains(report) -> list:
    """The domains of ``report`` that improved with evidence: the 95% CI of the paired change
    lies above 0 (a gain whose CI includes 0 is not evidence, however large the point estimate)."""
    return [d for d in report.domains if d.ci_low is not None and d.ci_low == d.ci_low and d.ci_low > 0]


def _fmt(d) -> str:
    return f"{d.domain} {100 * d.delta:+.1f} pts [{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}], p={d.p:.2g}"


def blocking_reasons(report, policy: PromotionPolicy, role: str = "baseline") -> list[tuple[str, str]]:
    """``(key, reason)`` for everything in ``report`` that blocks under ``policy``; key is the
    domain (a regression), or ``<kind>:<domain>`` (warn, underpowered, not_comparable, missing)."""
    vs = f"vs {role} ({report.baseline})"
    out = []
    for d in report.regressions:
        out.append((d.domain, f"regression {vs}: {_fmt(d)}"))
    if policy.block_on == "any":
        for d in report.warnings:
            out.append((f"warn:{d.domain}", f"significant drop (BH, block_on: any) {vs}: {_fmt(d)}, q={d.q:.2g}"))
    if policy.on_underpowered == "refuse":
        for d in report.underpowered:
            if d.verdict == "underpowered" and (d.protected or policy.block_on == "any"):
                out.append((f"underpowered:{d.domain}",
                            f"{'protected ' if d.protected else ''}domain {d.domain} is underpowered {vs}: its "
                            f"{d.test} test cannot reach p <= {report.alpha:g} (smallest attainable p "
                            f"{d.p_min:.3g} with n={d.n}), so it cannot show it did not regress; sweep more "
                            "items (or clusters), or set on_underpowered: allow"))
    if policy.refuse_not_comparable:
        for nc in report.not_comparable:
            out.append((f"not_comparable:{nc['domain']}",
                        f"{nc['domain']} not comparable {vs}: {nc['difference']} (baseline vs candidate); "
                        "sweep both with the same generation config"))
    if policy.refuse_missing_protected:
        for domain in report.missing.get("protected_not_compared", []):
            out.append((f"missing:{domain}", f"protected domain {domain} has no paired results {vs}"))
    return out


def unchecked(report, policy: PromotionPolicy) -> list[str]:
    """Domains that could block but were let through unchecked (underpowered under ``allow``)."""
    if policy.on_underpowered != "allow":
        return []
    return [d.domain for d in report.underpowered
            if d.verdict == "underpowered" and (d.protected or policy.block_on == "any")]


def policy_json(active: ActivePolicy | PromotionPolicy) -> str:
    return json.dumps(active.to_json(), sort_keys=True)
