"""Terminal-agent transcripts on the domain page: the lost/gained table summarises each episode and
the transcripts are shown side by side, read from the lake's results like any completion."""

from __future__ import annotations

import json
import shutil

import polars as pl

from storage.lake import Lake
from tests.ui.conftest import fresh_app
from ui import transcripts


def _episode(passed: bool, commands: list[tuple[str, int, str]], end: str = "done") -> str:
    turns = [{"turn": i + 1, "assistant": f"```bash\n{c}\n```", "action": "command", "command": c, "output": out,
              "exit_code": code, "seconds": 0.05, "generation_s": 0.4, "truncated": False, "timed_out": False}
             for i, (c, code, out) in enumerate(commands)]
    turns.append({"turn": len(turns) + 1, "assistant": "DONE", "action": "done", "command": None, "output": None,
                  "exit_code": None, "seconds": 0.0, "generation_s": 0.1, "truncated": False, "timed_out": False})
    return json.dumps({"end": end, "passed": passed, "turns": turns, "tests": "ok" if passed else "expected 3, got 2"})


def test_summary_and_markdown_show_every_command_exit_code_and_the_verdict():
    episode = _episode(False, [("wc -l data.txt", 0, "2 data.txt"), ("cat missing", 1, "cat: missing: No such file")])
    line = transcripts.summary(episode)
    assert line.startswith("2 command(s) in 3 turn(s), 1 non-zero exit; ended done; tests failed")
    assert "first: wc -l data.txt" in line
    text = transcripts.markdown(episode)
    assert "wc -l data.txt" in text and "exit 1" in text and "No such file" in text
    assert "**hidden tests:** failed" in text and "expected 3, got 2" in text
    long_output = "\n".join(f"line {i}" for i in range(100))
    clipped = transcripts.markdown(_episode(True, [("seq 100", 0, long_output)]))
    assert "line 0" in clipped and "line 99" not in clipped and "more lines" in clipped


def test_plain_completions_are_not_mistaken_for_transcripts():
    assert transcripts.parse_transcript("The answer is 42.") is None
    assert transcripts.parse_transcript('{"answer": 42}') is None  # JSON, but not an episode
    assert transcripts.parse_transcript("{broken") is None
    assert not transcripts.is_transcript_column(["42", _episode(True, [])])
    assert transcripts.is_transcript_column([_episode(True, []), None, _episode(False, [])])
    assert transcripts.summary("The answer is 42.") == "The answer is 42."


def test_domain_page_shows_transcripts_of_lost_items(fixture_lake, tmp_path, monkeypatch):
    home = tmp_path / "home"
    shutil.copytree(fixture_lake["home"], home)
    lake = Lake.at(home)
    regression = lake.read("regression")
    row = regression.filter(pl.col("items_lost") > 0).sort("created_at").tail(1).row(0, named=True)
    domain, baseline, candidate = row["domain"], row["baseline"], row["candidate"]
    # the domain's completions of both checkpoints become episodes: the champion passed, the candidate not
    for checkpoint, passed in ((baseline, True), (candidate, False)):
        results = lake.read("results", where={"checkpoint": checkpoint, "domain": domain})
        episodes = [_episode(passed, [(f"echo {item}", 0 if passed else 2, f"output of {item}")])
                    for item in results["item_id"].to_list()]
        lake.write_batch("results", {"checkpoint": checkpoint, "domain": domain, "batch": "b0"},
                         {"part": results.with_columns(pl.Series("completion", episodes))})
    monkeypatch.setenv("ASSAY_HOME", str(home))
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(fixture_lake["plugins"]))
    at = fresh_app()
    at.query_params["domain"] = domain
    at.run()
    at.switch_page("app_pages/domain.py").run()
    assert not at.exception, [e.value for e in at.exception]
    table = next(df.value for df in at.dataframe if "candidate_completion" in df.value.columns)
    lost = table[table["change"] == "lost"]
    assert len(lost) == row["items_lost"]
    assert lost["candidate_completion"].str.contains("tests failed").all()
    assert lost["baseline_completion"].str.contains("tests passed").all()
    labels = [e.label for e in at.expander]
    first = lost["item_id"].iloc[0]
    assert f"{first} (lost)" in labels
    text = "\n".join(m.value for m in at.markdown)
    assert f"echo {first}" in text and "exit 2" in text and "**hidden tests:** failed" in text
