"""AppTest of every dashboard page on the fixture lake: no exception, and the headers, metrics,
charts and numbers a domain owner relies on (checked against the lake read independently)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from storage.lake import Lake
from tests.ui.conftest import fresh_app
from ui.queries import PASS_THRESHOLD

PAGES = {
    "overview": "app_pages/overview.py",
    "domain": "app_pages/domain.py",
    "training": "app_pages/training.py",
    "regressions": "app_pages/regressions.py",
    "report_cards": "app_pages/report_cards.py",
}


def _open(page: str, **query):
    at = fresh_app()
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    if page != "overview":
        at.switch_page(PAGES[page]).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _latest_regression(home) -> pl.DataFrame:
    rows = Lake.at(home).read("regression")
    newest = rows.sort("created_at")["candidate"][-1]
    return rows.filter(pl.col("candidate") == newest)


def test_overview_counts_match_the_lake(lake_env):
    at = _open("overview")
    assert at.title[0].value == "Assay quality overview"
    at.sidebar.multiselect(key="filter_owners").set_value(["math-team@acme", "safety@acme"]).run()
    assert not at.exception
    latest = _latest_regression(lake_env["home"])
    mine = [d for i, d in enumerate(lake_env["domains"]) if i % 4 in (0, 2)]  # owners of those two
    latest = latest.filter(pl.col("domain").is_in(mine))
    metrics = _metrics(at)
    assert metrics["Domains"] == str(len(mine))
    assert metrics["Regressed"] == str(latest.filter(pl.col("verdict").is_in(["regression", "warn"])).height)
    improved = latest.filter((pl.col("verdict") == "ok") & (pl.col("ci_low") > 0)).height
    assert metrics["Improved"] == str(improved)
    assert int(metrics["Regressed"]) + int(metrics["Improved"]) + int(metrics["Unchanged"]) == len(mine)
    assert len(at.get("vega_lite_chart")) == 1  # the heatmap
    shown = at.dataframe[0].value
    assert sorted(shown["domain"]) == sorted(mine)
    assert any("Champion: **" + lake_env["champion"] + "**" in c.value for c in at.caption)


def test_overview_search_sort_and_paging(lake_env):
    at = _open("overview")
    at.sidebar.multiselect(key="filter_owners").set_value(["math-team@acme", "code-team@acme",
                                                           "safety@acme", "knowledge@acme"]).run()
    at.selectbox(key="overview_sort").set_value("name").run()
    names = list(at.dataframe[0].value["domain"])
    assert names == sorted(lake_env["domains"])
    at.text_input(key="overview_search").input("fx_00").run()
    assert list(at.dataframe[0].value["domain"]) == [d for d in sorted(lake_env["domains"]) if "fx_00" in d]
    at.text_input(key="overview_search").input("").run()
    at.selectbox(key="overview_sort").set_value("worst delta first").run()
    deltas = [d for d in at.dataframe[0].value["Δ (pts)"] if d == d]
    assert deltas == sorted(deltas)
    at.sidebar.multiselect(key="filter_tags").set_value(["code"]).run()
    assert not at.exception
    assert sorted(at.dataframe[0].value["domain"]) == [d for i, d in enumerate(lake_env["domains"]) if i % 4 == 1]


def test_domain_page_shows_verdict_trend_and_lost_items(lake_env):
    domain = lake_env["domains"][2]
    at = _open("domain", domain=domain)
    assert at.selectbox(key="domain_choice").value == domain
    headers = [h.value for h in at.header]
    assert headers == ["Latest regression verdict", "Data quality"]
    row = Lake.at(lake_env["home"]).read("regression").filter(pl.col("domain") == domain) \
        .sort("created_at").tail(1).row(0, named=True)
    metrics = _metrics(at)
    assert metrics["Δ score"] == f"{row['delta'] * 100:+.1f} pts"
    assert metrics["MDE"] == f"{row['mde'] * 100:.1f} pts"
    assert metrics["Items lost / gained"] == f"{row['items_lost']} / {row['items_gained']}"
    # charts: score trend, gate pass rates, quarantine reasons, difficulty histogram, measured pass rates (2)
    assert len(at.get("vega_lite_chart")) == 6  # + the pass-rate histograms and their movement
    at.radio(key="domain_items_show").set_value("all changed").run()
    assert not at.exception
    table = next(df.value for df in at.dataframe if "candidate_completion" in df.value.columns)
    assert set(table["change"]) <= {"lost", "gained"}
    assert (table["change"] == "lost").sum() == row["items_lost"]
    lost = table[table["change"] == "lost"]
    assert (lost["baseline_score"] >= PASS_THRESHOLD).all() and (lost["candidate_score"] < PASS_THRESHOLD).all()
    assert lost["prompt"].notna().all()  # joined from the eval samples


def test_training_page_links_the_mlflow_run(lake_env):
    at = _open("training")
    metrics = _metrics(at)
    assert metrics["Steps"] == "6"
    assert metrics["Domains trained"] == "4" and metrics["Domains validated"] == "5"  # one more watched
    assert metrics["Zero-variance groups (last step)"].endswith("%")
    link = " ".join(m.value for m in at.markdown)
    assert "synth-grpo" in link and f"/runs/{lake_env['run_id']})" in link
    # reward, held-out validation, accuracy, KL, zero-variance, tokens/s; hedging share, prompt-copy share
    # and copy reward; the learned reward against the verifier (the synthetic run's third domain has one)
    assert len(at.get("vega_lite_chart")) == 10


def test_training_page_shows_validation_beside_the_train_reward_and_flags_forgetting(lake_env):
    """The synthetic run validates its four trained domains and one watched domain every 2 steps; the
    watched one falls and is flagged from step 6 (ui.synthetic): the validation chart sits next to the
    train reward, and the forgetting warning names the domain, when, and the evidence."""
    history = Lake.at(lake_env["home"]).read("training_history")
    flagged = history.filter(pl.col("forgetting") >= 1)
    [watched] = flagged["domain"].unique().to_list()
    assert history.filter((pl.col("domain") == watched) & pl.col("reward_mean").is_not_null()).height == 0
    at = _open("training")
    charts = at.get("vega_lite_chart")
    titles = [json.loads(c.proto.spec)["title"] for c in charts[:2]]
    assert titles == ["Mean reward per domain (train)", "Held-out validation score"]
    assert any(s.value == "Forgetting" for s in at.subheader)
    [warning] = [w.value for w in at.warning if "forgetting flagged" in w.value]
    assert warning.startswith(f"{watched}: forgetting flagged at 1 of 3 validations, first at step 6, last at step 6 "
                              "(still flagged at the last validation): held-out score 0.600 at step 0, 0.420 at the "
                              "last validation (change -0.180 at its last flag, BH q 0.004)"), warning


def test_training_page_flags_a_learned_reward_rising_while_its_verifier_falls(lake_env):
    """The synthetic run's third trained domain has a learned reward that rises while the verifier
    falls, flagged by the trainer's watch from step 5 (ui.synthetic): warned, with the rule; no
    other domain is."""
    history = Lake.at(lake_env["home"]).read("training_history")
    learned = sorted(set(history.filter(pl.col("learned_mean").is_not_null())["domain"]))
    assert len(learned) == 1
    at = _open("training")
    assert any(m.value == "**Learned reward against the verifier**" for m in at.markdown)
    warnings = [w.value for w in at.warning if "proxy over-optimisation" in w.value]
    assert warnings == [f"{learned[0]}: the learned reward rose while the verifier fell (proxy over-optimisation), "
                        "flagged at 2 of 3 judged steps, first at step 5, last at step 6: the policy may be gaming "
                        "its reward model; sweep the checkpoints before the first flag."], warnings
    assert any("reward_hacking_window" in c.value and "|t| >= 2" in c.value for c in at.caption)
    assert not at.error  # a warn run: not stopped


def test_training_page_flags_a_rising_reward_hacking_share(lake_env):
    """The synthetic run's first trained domain hedges more and more (ui.synthetic): flagged, with
    the rule in words; the flat domains are not."""
    history = Lake.at(lake_env["home"]).read("training_history")
    climbing = history.filter(pl.col("domain") != "_all").sort("step")["domain"][0]
    trained = sorted(set(history["domain"]) - {"_all"})
    at = _open("training")
    assert any(s.value == "Reward-hacking signals" for s in at.subheader)
    warnings = [w.value for w in at.warning]
    flagged = [d for d in trained if any(w.startswith(f"{d}: rollouts stating more than one answer rose")
                                         for w in warnings)]
    assert flagged == [climbing], warnings
    assert not any("copying the prompt rose" in w for w in warnings)  # a flat share is no alarm
    rule = " ".join(c.value for c in at.caption)
    assert "last third of steps" in rule and "10 percentage points" in rule


def test_training_page_renders_a_run_recorded_before_the_hacking_signals(tmp_path, monkeypatch):
    from storage import tables as T
    from ui.queries import TRAINING_LATER_COLUMNS

    home = tmp_path / "old_home"
    frame = T.conform(pl.DataFrame([{"run_id": "r-old", "step": s, "domain": d, "reward_mean": 0.5,
                                     "accuracy": 0.5, "zero_var_frac": 0.1, "created_at": f"2026-11-01T00:0{s}:00"}
                                    for s in (1, 2) for d in ("_all", "a")]), T.TRAINING_HISTORY)
    Lake.at(home).write_batch("training_history", {"run": "r-old"},
                              {"part": frame.drop(*TRAINING_LATER_COLUMNS)})  # the contract before them
    monkeypatch.setenv("ASSAY_HOME", str(home))
    at = _open("training")
    assert _metrics(at)["Steps"] == "2"
    assert any("recorded no reward-hacking signals" in i.value for i in at.info)
    assert not any(" rose from " in w.value for w in at.warning)  # (its one warning: no MLflow store here)
    assert len(at.get("vega_lite_chart")) == 3  # reward, accuracy, zero-variance; no signal charts of nulls


def test_training_page_says_when_the_watch_stopped_the_run(tmp_path, monkeypatch, empty_mlflow_db):
    """A run that reward_hacking: stop ended (MLflow status KILLED, the trainer's stop tags): the page
    says so, with the reason, beside the flagged domain's warning."""
    import shutil

    from storage import tables as T
    from storage.tracking import Tracker

    home = tmp_path / "stopped_home"
    home.mkdir()
    shutil.copy(empty_mlflow_db, home / "mlflow.db")
    lake = Lake.at(home)
    tracker = Tracker(lake.mlflow_uri, str(lake.mlflow_artifacts))
    run_id = tracker.start("hacked", tags={"assay.stopped": "reward_hacking", "assay.stopped_step": "5",
                                           "assay.stop_reason": "essays: proxy over-optimisation over steps 2-5"})
    tracker.finish("KILLED")
    rows = [{"run_id": run_id, "step": s, "domain": d, "reward_mean": 0.5, "accuracy": 0.5, "zero_var_frac": 0.1,
             "created_at": f"2026-11-01T00:0{s}:00", "multi_answer_share": 0.0, "prompt_copy_share": 0.0,
             **({"learned_mean": 0.5 + 0.1 * s, "score_mean": 0.6 - 0.1 * s,
                 "reward_hacking": None if s < 4 else float(s == 5)} if d == "essays" else {})}
            for s in range(1, 6) for d in ("_all", "essays")]
    lake.write_batch("training_history", {"run": run_id}, {"part": T.conform(pl.DataFrame(rows), T.TRAINING_HISTORY)})
    monkeypatch.setenv("ASSAY_HOME", str(home))
    at = _open("training")
    assert [e.value for e in at.error] == ["This run was stopped after step 5 for reward hacking (reward_hacking: "
                                           "stop); that step's checkpoint is saved. essays: proxy over-optimisation "
                                           "over steps 2-5"]
    assert any(w.value.startswith("essays: the learned reward rose while the verifier fell") and
               "flagged at 1 of 2 judged steps, first at step 5" in w.value for w in at.warning)


def test_regressions_page_marks_protected_domains(lake_env):
    at = _open("regressions")
    table = at.dataframe[0].value
    latest = _latest_regression(lake_env["home"])
    assert len(table) == latest.height
    protected = set(latest.filter(pl.col("protected"))["domain"])
    assert protected and set(table[table["protected"] == "protected"]["domain"]) == protected
    ranks = table["verdict"].map({"regression": 0, "warn": 1, "ok": 2}).tolist()
    assert ranks == sorted(ranks)
    assert _metrics(at)["Regressions"] == str(latest.filter(pl.col("verdict") == "regression").height)
    at.multiselect(key="regressions_verdicts").set_value(["ok"]).run()
    assert set(at.dataframe[0].value["verdict"]) == {"ok"}
    assert len(at.get("vega_lite_chart")) == 1


def test_regressions_page_explains_a_refused_promotion(lake_env):
    refused = Lake.at(lake_env["home"]).read("promotions").filter(~pl.col("promoted")).row(0, named=True)
    at = _open("regressions")
    box = at.selectbox(key="regressions_pick")
    choice = next(i for i, label in enumerate(box.options) if label.startswith(refused["candidate"] + " vs "))
    box.select_index(choice).run()
    assert not at.exception
    rows = Lake.at(lake_env["home"]).read("regression").filter(pl.col("candidate") == refused["candidate"])
    metrics = _metrics(at)
    assert metrics["Regressions"] == str(rows.filter(pl.col("verdict") == "regression").height) != "0"
    assert metrics["Protected regressions"] != "0"
    assert any("refused" in e.value and refused["reason"] in e.value for e in at.error)


@pytest.mark.parametrize("page", list(PAGES))
def test_empty_lake_says_what_to_run(empty_env, page):
    at = _open(page)
    texts = " ".join(i.value for i in at.info)
    assert "make demo" in texts, texts
    assert not (empty_env / "lake").exists()  # reading never creates the lake


def test_pages_never_import_training_code(lake_env):
    """The dashboard reads the lake and MLflow only: rendering every page in a fresh interpreter
    must not import training code, torch or transformers."""
    import subprocess
    import sys

    from tests.ui.conftest import APP, REPO

    script = f"""
import sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({APP!r}, default_timeout=120)
at.run()
for page in {list(PAGES.values())!r}:
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
print(sorted(m for m in sys.modules if m.split('.')[0] in ('training', 'torch', 'transformers', 'deepspeed')))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture
def verdicts_env(tmp_path, monkeypatch) -> dict:
    """A lake whose comparison holds an underpowered and a not-comparable domain, and a team policy."""
    import numpy as np

    from evaluation.comparability import gen_identity
    from evaluation.regression import compare_results

    rng = np.random.default_rng(0)

    def rows(domain, p, clusters=None, params=None):
        config, text = gen_identity(params) if params else (None, None)
        return pl.DataFrame([{"domain": domain, "item_id": f"{domain}-{i}", "sample_idx": s,
                              "score": float(rng.random() < pi), "cluster_id": None if clusters is None else f"t{i % clusters}",
                              "gen_config": config, "gen_params": text}
                             for i, pi in enumerate(p) for s in range(2)],
                            schema_overrides={"cluster_id": pl.Utf8, "gen_config": pl.Utf8, "gen_params": pl.Utf8})

    greedy = {"max_new_tokens": 64, "temperature": 0.0, "prompt_format": "raw"}
    base = pl.concat([rows("few", np.full(30, 0.9), 3), rows("wide", np.full(100, 0.5)), rows("gen", np.full(40, 0.5), params=greedy)])
    cand = pl.concat([rows("few", np.full(30, 0.1), 3), rows("wide", np.full(100, 0.5)),
                      rows("gen", np.full(40, 0.5), params={**greedy, "max_new_tokens": 256})])
    report = compare_results(base, cand, protected=["few"], baseline_name="champ", candidate_name="cand")
    home = tmp_path / "home"
    Lake.at(home).write_batch("regression", {"candidate": "cand", "baseline": "champ"}, {"part": report.to_frame()})
    (home / "promotion.yaml").write_text("protected: [few]\nblock_on: any\n")
    monkeypatch.setenv("ASSAY_HOME", str(home))
    monkeypatch.delenv("ASSAY_DOMAINS_PATH", raising=False)
    return {"home": home, "report": report}


def test_regressions_page_shows_underpowered_not_comparable_and_the_policy(verdicts_env):
    at = _open("regressions")
    table = at.dataframe[0].value.set_index("domain")
    assert table.loc["few", "verdict"] == "underpowered" and table.loc["few", "MDE (pts)"] == float("inf")
    assert table.loc["gen", "verdict"] == "not_comparable" and table.loc["gen", "detail"] == "max_new_tokens: 64 vs 256"
    assert table.loc["wide", "verdict"] == "ok"
    metrics = _metrics(at)
    assert (metrics["Underpowered"], metrics["Not comparable"], metrics["Domains compared"]) == ("1", "1", "2")
    panel = " ".join(m.value for m in at.expander[0].markdown)
    assert f"source: {verdicts_env['home'] / 'promotion.yaml'}" in panel and "protected: few" in panel
    assert "any BH-significant drop" in panel


def test_domain_page_shows_an_infinite_mde_and_why_a_domain_is_not_comparable(verdicts_env):
    at = _open("domain", domain="few")
    metrics = _metrics(at)
    assert metrics["Verdict"] == "UNDERPOWERED" and metrics["MDE"] == "∞"
    at = _open("domain", domain="gen")
    assert _metrics(at)["Verdict"] == "NOT COMPARABLE"
    assert any("max_new_tokens: 64 vs 256" in w.value for w in at.warning)


def _version_of(client, checkpoint: str) -> str:
    """The model version of ``checkpoint`` in the registry (registered here when missing)."""
    from mlflow.exceptions import MlflowException

    found = client.search_model_versions(f"name = 'assay-policy' and tags.checkpoint = '{checkpoint}'")
    if found:
        return max(found, key=lambda v: int(v.version)).version
    try:
        client.create_registered_model("assay-policy")
    except MlflowException:
        pass
    return client.create_model_version("assay-policy", source=f"file:///models/{checkpoint}",
                                       tags={"checkpoint": checkpoint}).version


def test_champion_is_the_mlflow_alias_and_a_move_outside_assay_is_flagged(tmp_path, monkeypatch, empty_mlflow_db):
    """The pages show the champion the promotion step reads (the MLflow alias), not a guess from
    the lake; when the alias is moved without Assay they show the alias and say so."""
    import shutil

    from mlflow.tracking import MlflowClient

    from evaluation.promotion import PromotionDecision, apply_promotion
    from ui.synthetic import SyntheticSpec, write_synthetic_lake

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(empty_mlflow_db, home / "mlflow.db")
    summary = write_synthetic_lake(home, SyntheticSpec(domains=3, checkpoints=3, items=8, training_steps=2, seed=3))
    monkeypatch.setenv("ASSAY_HOME", str(home))
    monkeypatch.delenv("ASSAY_DOMAINS_PATH", raising=False)
    recorded = summary["champion"]
    at = _open("overview")
    assert any(f"Champion: **{recorded}**" in c.value for c in at.caption)
    assert not at.warning

    # someone moves the alias in the MLflow UI: promotions would now compare against `moved`
    client = MlflowClient(tracking_uri=Lake.at(home).mlflow_uri)
    moved = next(c for c in summary["checkpoints"] if c != recorded)
    client.set_registered_model_alias("assay-policy", "champion", _version_of(client, moved))
    for page in ("overview", "regressions"):
        at = _open(page)
        shown = " ".join(c.value for c in at.caption)
        assert (f"Champion: **{moved}**" if page == "overview" else f"Champion now: **{moved}**") in shown, shown
        warning = " ".join(w.value for w in at.warning)
        assert f"points at {moved}" in warning and f"made {recorded} champion" in warning, warning

    # a promotion through Assay moves the alias and records it: they agree again, no warning
    candidate = next(c for c in summary["checkpoints"] if c not in (recorded, moved))
    apply_promotion(Lake.at(home), Lake.at(home).mlflow_uri, PromotionDecision(candidate, moved, True, "promoted: test"))
    at = _open("overview")
    assert any(f"Champion: **{candidate}**" in c.value for c in at.caption)
    assert not at.warning


def test_domain_page_shows_the_latest_reward_attack(tmp_path, monkeypatch):
    """A real attack run written to the lake (quality.reward_attacks): the paid families first, the
    example, and a newer clean run replaces the verdict."""
    from domains import Domain
    from quality.reward_attacks import attack_domain, write_attacks

    def samples(split, n, seed):
        for i in range(n):
            yield {"id": f"l-{split}-{i}", "prompt": f"Is {i} even? Answer True or False.", "answer": str(i % 2 == 0)}

    home = tmp_path / "attack_home"
    lake = Lake.at(home)
    monkeypatch.setenv("ASSAY_HOME", str(home))
    leaky = Domain(name="logic", owner="o@x", description="d", samples=samples,
                   score=lambda c, s: float(s["answer"].lower() in c.lower()))
    write_attacks(lake, [attack_domain(leaky, items=4)], source="cli")
    at = _open("domain", domain="logic")
    assert any("earned reward without the work" in e.value for e in at.error), [e.value for e in at.error]
    table = next(d.value for d in at.dataframe if "family" in d.value.columns)
    assert table["paid"].iloc[0] > 0 and table["example"].iloc[0]

    sound = Domain(name="logic", owner="o@x", description="d", samples=samples,
                   score=lambda c, s: float(c.strip() == s["answer"]))
    write_attacks(lake, [attack_domain(sound, items=4)], source="cli")
    at = _open("domain", domain="logic")
    assert any("No hack family earned reward" in s.value for s in at.success)
    assert not any("earned reward without the work" in e.value for e in at.error)


def test_domain_page_blocks_a_learned_reward_that_passed_only_a_laxer_bar_than_the_domains(tmp_path, monkeypatch):
    """A plugin domain declaring its bar (LearnedReward(gate=...)) and a real, passed gate check of
    a rule-based reward at the gate's laxer defaults: the page says training is blocked and why; at
    the domain's bar it says passed."""
    from quality.reward_gate import check_reward, record_reward_gate
    from quality.reward_gate_config import RewardGateConfig
    from storage.preference_pairs import PreferencePair
    from tests.conftest import PLUGIN_TEMPLATE, write_plugin

    plugins, home = tmp_path / "plugins", tmp_path / "home"
    write_plugin(plugins, "barred", PLUGIN_TEMPLATE.format(name="barred").replace(
        "from domains import Domain", "from domains import Domain, LearnedReward").replace(
        'tags=("test",),', 'tags=("test",), learned_reward=LearnedReward(gate={"min_pairs": 40}),'))
    monkeypatch.setenv("ASSAY_HOME", str(home))
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(plugins))
    pairs = [PreferencePair(id=f"p{i}", prompt=f"What is {i} plus 1?", chosen=str(i + 1), rejected=str(i + 2))
             for i in range(50)]
    truth = {p.prompt: p.chosen for p in pairs}
    scorer = lambda prompts, answers: [float(truth[p] == a) for p, a in zip(prompts, answers)]  # noqa: E731
    lake = Lake.at(home)
    lax = check_reward(scorer, pairs[:30], RewardGateConfig(probes=["length_padding"]))
    assert lax.passed, lax.reasons  # 30 pairs clear the default minimum of 20, not the domain's 40
    record_reward_gate(lake, None, lax, domain="barred", reward_model="rm-x", pairs_source=None,
                       pairs_fingerprint=None)
    at = _open("domain", domain="barred")
    errors = [e.value for e in at.error]
    assert any("passed a gate laxer than barred's declared bar" in e and "min_pairs 20 < 40" in e
               for e in errors), errors

    at_bar = check_reward(scorer, pairs, RewardGateConfig(min_pairs=40))
    assert at_bar.passed, at_bar.reasons
    record_reward_gate(lake, None, at_bar, domain="barred", reward_model="rm-x", pairs_source=None,
                       pairs_fingerprint=None)
    at = _open("domain", domain="barred")
    assert not at.error
    assert any(s.value.startswith("Its learned reward passed its gate at the domain's bar") for s in at.success)
