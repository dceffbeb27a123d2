"""Refused: a taskset that gives the model tools (a Toolset, served over MCP)."""

import verifiers.v1 as vf


class LookupToolset(vf.Toolset[vf.SharedToolsetConfig]):
    TOOL_PREFIX = "lookup"

    @vf.tool
    async def capital(self, country: str) -> str:
        """The capital of a country."""
        return {"France": "Paris"}.get(country, "unknown")


class CapitalData(vf.TaskData):
    answer: str


class CapitalTask(vf.Task[CapitalData]):
    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == self.data.answer)


class CapitalConfig(vf.TasksetConfig):
    tools: vf.SharedToolsetConfig = vf.SharedToolsetConfig()


class CapitalTaskset(vf.Taskset[CapitalTask, CapitalConfig]):
    @classmethod
    def toolsets(cls, config):
        return [LookupToolset(config.tools)]

    def load(self):
        return [CapitalTask(CapitalData(prompt="Capital of France?", answer="Paris"), self.config.task)]


__all__ = ["CapitalTaskset"]
