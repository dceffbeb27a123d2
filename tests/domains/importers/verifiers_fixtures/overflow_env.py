"""Imported, then a scoring error: a reward that returns 2.0 for an exclaimed reply (outside [0, 1])."""

import verifiers.v1 as vf


class LoudData(vf.TaskData):
    answer: str


class LoudTask(vf.Task[LoudData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        reply = trace.last_reply
        return 2.0 if reply.endswith("!!") else float(reply == self.data.answer)


class LoudTaskset(vf.Taskset[LoudTask, vf.TasksetConfig]):
    def load(self):
        return [LoudTask(LoudData(id=f"l{i}", prompt=f"Say {i}.", answer=str(i)), self.config.task)
                for i in range(6)]


__all__ = ["LoudTaskset"]
