"""Terminal-agent transcripts as a domain owner reads them.

A terminal domain's sweep stores each episode in ``results.completion`` as JSON
(:func:`evaluation.sweep.run_episode_samples`: ``end``, ``passed``, ``turns`` with every command,
output, exit code and timing, and the tail of the hidden tests' output). The domain page shows a
one-line summary in the lost/gained table and the two transcripts side by side below it. Pure
functions: no Streamlit here, so they are tested without an app.
"""

from __future__ import annotations

import json

OUTPUT_LINES = 12  # lines of a command's output shown per turn (the lake keeps what the sandbox returned)


def parse_transcript(completion) -> dict | None:
    """The episode behind a ``results.completion``, or None when it is not a transcript."""
    if not isinstance(completion, str) or not completion.startswith("{"):
        return None
    try:
        data = json.loads(completion)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("turns"), list) or "end" not in data:
        return None
    return data


def is_transcript_column(values) -> bool:
    """Whether a column of completions holds episodes (every non-empty one parses)."""
    present = [v for v in values if v]
    return bool(present) and all(parse_transcript(v) is not None for v in present)


def summary(completion) -> str:
    """One line: commands run, how the episode ended, the tests' verdict."""
    episode = parse_transcript(completion)
    if episode is None:
        return "" if completion is None else str(completion)
    turns = episode["turns"]
    commands = [t for t in turns if t.get("action") == "command"]
    failed = sum(1 for t in commands if t.get("exit_code") not in (0, None))
    verdict = "tests passed" if episode.get("passed") else "tests failed"
    first = f"; first: {commands[0]['command'].splitlines()[0][:60]}" if commands else ""
    return (f"{len(commands)} command(s) in {len(turns)} turn(s), {failed} non-zero exit; ended {episode['end']}; "
            f"{verdict}{first}")


def _clip(text: str, lines: int = OUTPUT_LINES) -> str:
    rows = text.splitlines()
    if len(rows) <= lines:
        return text
    return "\n".join(rows[:lines]) + f"\n... ({len(rows) - lines} more lines)"


def markdown(completion) -> str:
    """The whole episode as Markdown: per turn the command (or DONE / no command), exit code and
    time, the output (clipped), then the hidden tests' verdict and output tail."""
    episode = parse_transcript(completion)
    if episode is None:
        return "_not a transcript_"
    parts = []
    for turn in episode["turns"]:
        action = turn.get("action")
        head = f"**Turn {turn.get('turn')}**"
        if action == "command":
            timing = f", {turn.get('seconds', 0.0):.2f} s" if turn.get("seconds") is not None else ""
            flags = "".join(f" ({name.replace('_', ' ')})" for name in ("timed_out", "truncated") if turn.get(name))
            parts.append(f"{head}: exit {turn.get('exit_code')}{timing}{flags}\n\n```bash\n{turn.get('command')}\n```")
            if turn.get("output"):
                parts.append(f"```text\n{_clip(turn['output'])}\n```")
        elif action == "done":
            parts.append(f"{head}: DONE")
        else:
            said = (turn.get("assistant") or "").strip().replace("\n", " ")[:200]
            parts.append(f"{head}: no command ({said!r})")
    verdict = "passed" if episode.get("passed") else "failed"
    parts.append(f"**Ended:** {episode['end']}; **hidden tests:** {verdict}")
    if episode.get("tests"):
        parts.append(f"```text\n{_clip(episode['tests'], 8)}\n```")
    return "\n\n".join(parts)
