"""Refused here: the taskset's data is only on the Hugging Face Hub, which this machine cannot reach."""

import verifiers.v1 as vf


class HubData(vf.TaskData):
    answer: str


class HubTask(vf.Task[HubData]):
    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == self.data.answer)


class HubTaskset(vf.Taskset[HubTask, vf.TasksetConfig]):
    def load(self):
        from datasets import load_dataset

        rows = load_dataset("assay-tests/no-such-dataset", split="train")
        return [HubTask(HubData(idx=i, prompt=r["prompt"], answer=r["answer"]), self.config.task)
                for i, r in enumerate(rows)]


__all__ = ["HubTaskset"]
