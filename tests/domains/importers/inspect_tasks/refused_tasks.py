"""Inspect AI tasks that Assay's Inspect importer refuses before anything runs, one feature each (the
tests check that the refusal names it and that nothing is written). Written against Inspect's
documented API; nothing here is ever evaluated."""

from inspect_ai import Task, task
from inspect_ai.dataset import Sample, hf_dataset
from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ContentImage, ContentText
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, choice, f1, includes, match, model_graded_qa, scorer
from inspect_ai.scorer import accuracy
from inspect_ai.solver import Generate, TaskState, generate, solver, use_tools, user_message
from inspect_ai.tool import tool

SAMPLES = [Sample(id="r1", input="What is 2 + 2?", target="4"), Sample(id="r2", input="What is 3 + 3?", target="6")]


@task
def in_sandbox() -> Task:
    return Task(dataset=SAMPLES, solver=generate(), scorer=match(), sandbox="docker")


@task
def sample_in_sandbox() -> Task:
    return Task(dataset=[Sample(id="s1", input="List the files.", target="a.txt", sandbox="docker")],
                solver=generate(), scorer=includes())


@tool
def calculator():
    async def execute(expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: The expression.
        """
        return expression

    return execute


@task
def with_tools() -> Task:
    return Task(dataset=SAMPLES, solver=[use_tools(calculator()), generate()], scorer=match())


@task
def model_graded() -> Task:
    return Task(dataset=SAMPLES, solver=generate(), scorer=model_graded_qa())


@solver
def shout():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.user_prompt.text = state.user_prompt.text.upper()
        return await generate(state)

    return solve


@task
def custom_solver() -> Task:
    return Task(dataset=SAMPLES, solver=shout(), scorer=match())


@scorer(metrics=[accuracy()])
def last_word():
    async def score(state: TaskState, target: Target) -> Score:
        words = state.output.completion.split()
        return Score(value=CORRECT if words and words[-1] == target.text else INCORRECT)

    return score


@task
def custom_scorer() -> Task:
    return Task(dataset=SAMPLES, solver=generate(), scorer=last_word())


@task
def two_scorers() -> Task:
    return Task(dataset=SAMPLES, solver=generate(), scorer=[match(), includes()])


@task
def with_image() -> Task:
    image = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
             "AAAABJRU5ErkJggg==")
    return Task(dataset=[Sample(id="i1", input=[ChatMessageUser(content=[ContentText(text="What colour is this pixel?"),
                                                                          ContentImage(image=image)])],
                                target="red")],
                solver=generate(), scorer=includes())


@task
def few_shot_turns() -> Task:
    return Task(dataset=[Sample(id="f1", input=[ChatMessageUser(content="2 + 2?"), ChatMessageAssistant(content="4"),
                                                ChatMessageUser(content="3 + 3?")], target="6")],
                solver=generate(), scorer=match())


@task
def second_user_turn() -> Task:
    return Task(dataset=SAMPLES, solver=[generate(), user_message("Are you sure?"), generate()], scorer=match())


@task
def from_hub() -> Task:
    return Task(dataset=hf_dataset("example-org/arithmetic", split="test"), solver=generate(), scorer=match())


@task
def choice_without_multiple_choice() -> Task:
    return Task(dataset=[Sample(id="c1", input="Closest planet to the Sun?", choices=["Venus", "Mercury"], target="B")],
                solver=generate(), scorer=choice())


@task
def f1_with_answer_fn() -> Task:
    return Task(dataset=SAMPLES, solver=generate(), scorer=f1(answer_fn=lambda text: text.split("ANSWER:")[-1]))


@task
def no_target() -> Task:
    return Task(dataset=[Sample(id="n1", input="Say something.")], solver=generate(), scorer=includes())
