"""Refused: a reward that runs in the rollout's runtime (a sandbox), as gsm8k's verify.py does."""

import verifiers.v1 as vf


class ShellData(vf.TaskData):
    answer: str


class ShellTask(vf.Task[ShellData]):
    @vf.reward
    async def file_written(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        result = await runtime.run("cat out.txt")
        return float(result.stdout.strip() == self.data.answer)


class ShellTaskset(vf.Taskset[ShellTask, vf.TasksetConfig]):
    def load(self):
        return [ShellTask(ShellData(prompt="Write HELLO to out.txt.", answer="HELLO"), self.config.task)]


__all__ = ["ShellTaskset"]
