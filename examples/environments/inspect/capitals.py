"""Capital cities as an Inspect AI task (Assay's README, "Bring your own environments").

Written against Inspect's documented API: a jsonl file dataset (fields input, target, id, metadata),
a system message, a prompt template that also reads the sample's metadata, generate(), and the
built-in match() scorer (the target at the end of the answer, case and punctuation ignored). A
sample may list several targets (a country with more than one capital): any of them is correct.

    inspect eval examples/environments/inspect/capitals.py --model mockllm/model
    assay domains import inspect examples/environments/inspect/capitals.py
"""

from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import match
from inspect_ai.solver import generate, prompt_template, system_message

SYSTEM = "You are a geography tutor. Answer with the name of the city, nothing else."
TEMPLATE = "{prompt}\nThe country is in {continent}."


@task
def capitals(location: str = "end") -> Task:
    return Task(
        dataset=json_dataset("capitals.jsonl"),
        solver=[system_message(SYSTEM), prompt_template(TEMPLATE), generate()],
        scorer=match(location=location),
    )
