"""Refused: a reward that reads a metric measured in the rollout's runtime (offline, verifiers skips the
metric, and the reward would score what the sandbox never measured)."""

import verifiers.v1 as vf


class ProgramData(vf.TaskData):
    expected: str


class ProgramTask(vf.Task[ProgramData]):
    @vf.metric
    async def run_program(self, trace: vf.Trace, runtime: vf.Runtime) -> dict[str, float]:
        await runtime.write("solution.py", trace.last_reply.encode())
        result = await runtime.run(["python3", "solution.py"], {})
        return {"passed": float(result.stdout.strip() == self.data.expected)}

    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        return trace.metrics.get("passed", 0.0)


class ProgramTaskset(vf.Taskset[ProgramTask, vf.TasksetConfig]):
    def load(self):
        return [ProgramTask(ProgramData(prompt="Print 7.", expected="7"), self.config.task)]


__all__ = ["ProgramTaskset"]
