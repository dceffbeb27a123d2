"""Accepted: a continuous reward (the overlap of the tagged reply with the reversed text, as reverse_text
scores it) and a zero-weight reward that only reports the reply's length; the rows come from a data file
beside this one, which the import copies with it."""

import json
import re
from difflib import SequenceMatcher
from pathlib import Path

import verifiers.v1 as vf

DATA = Path(__file__).parent / "overlap_data.jsonl"
_TAG = re.compile(r"<reversed>(.*?)</reversed>", re.DOTALL)


class OverlapData(vf.TaskData):
    answer: str


class OverlapTask(vf.Task[OverlapData]):
    @vf.reward(weight=1.0)
    async def overlap(self, trace: vf.Trace) -> float:
        match = _TAG.search(trace.last_reply)
        return SequenceMatcher(None, match.group(1).strip() if match else "", self.data.answer).ratio()

    @vf.reward(weight=0.0)
    async def reply_length(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class OverlapConfig(vf.TasksetConfig):
    limit: int = 100


class OverlapTaskset(vf.Taskset[OverlapTask, OverlapConfig]):
    def load(self):
        rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()][: self.config.limit]
        return [OverlapTask(OverlapData(id=row["id"], prompt=f"Reverse the text inside <reversed> tags: {row['text']}",
                                        answer=row["text"][::-1]), self.config.task)
                for row in rows]


__all__ = ["OverlapTaskset"]
