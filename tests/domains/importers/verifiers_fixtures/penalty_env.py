"""Refused: a negative-weight reward (a penalty), which cannot be normalised into [0, 1] as it is."""

import verifiers.v1 as vf


class PenaltyData(vf.TaskData):
    answer: str


class PenaltyTask(vf.Task[PenaltyData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == self.data.answer)

    @vf.reward(weight=-0.5)
    async def too_long(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply) > 20)


class PenaltyTaskset(vf.Taskset[PenaltyTask, vf.TasksetConfig]):
    def load(self):
        return [PenaltyTask(PenaltyData(id=f"p{i}", prompt=f"Say {i}.", answer=str(i)), self.config.task)
                for i in range(4)]


__all__ = ["PenaltyTaskset"]
