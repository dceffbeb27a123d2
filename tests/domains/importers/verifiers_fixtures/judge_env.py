"""Refused: a reward that asks a judge model (a JudgeConfig on the task config, as verifiers' docs show)."""

import verifiers.v1 as vf


class PoemJudge(vf.Judge[bool]):
    prompt = "Poem: {response}\nIs it a haiku? Reply yes or no."

    def parse(self, response: vf.JudgeResponse[bool]) -> bool:
        return "yes" in response.text


class PoemData(vf.TaskData):
    answer: str


class PoemTaskConfig(vf.TaskConfig):
    judge: vf.JudgeConfig = vf.JudgeConfig(model="openai/gpt-5-mini")


class PoemTask(vf.Task[PoemData, vf.State, PoemTaskConfig]):
    @vf.reward
    async def haiku(self, trace: vf.Trace) -> float:
        result = await PoemJudge(self.config.judge).evaluate(trace=trace, response=trace.last_reply)
        return float(result.parsed)


class PoemConfig(vf.TasksetConfig):
    task: PoemTaskConfig = PoemTaskConfig()


class PoemTaskset(vf.Taskset[PoemTask, PoemConfig]):
    def load(self):
        return [PoemTask(PoemData(prompt="Write a haiku about rain.", answer="-"), self.config.task)]


__all__ = ["PoemTaskset"]
