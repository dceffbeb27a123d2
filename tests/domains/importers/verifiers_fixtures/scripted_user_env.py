"""Refused: a multi-turn environment (an Env of its own whose scripted user answers the model)."""

import verifiers.v1 as vf


class EchoData(vf.TaskData):
    answer: str
    follow_ups: list[str]


class EchoTask(vf.Task[EchoData]):
    @vf.reward(weight=1.0)
    async def last_turn(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == self.data.answer)


class EchoEnv(vf.SingleAgentEnv):
    async def run(self, task, agents):
        async with agents.agent.interaction(task) as interaction:
            for prompt in task.data.follow_ups:
                if (await interaction.turn(prompt)).terminated:
                    break


class EchoTaskset(vf.Taskset[EchoTask, vf.TasksetConfig]):
    def load(self):
        return [EchoTask(EchoData(prompt="Say a word.", answer="word", follow_ups=["Again."]), self.config.task)]


__all__ = ["EchoTaskset", "EchoEnv"]
