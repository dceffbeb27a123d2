"""Inspect AI tasks for the parity tests of Assay's Inspect importer, one per supported scorer, written
against Inspect's documented API (file datasets in json/jsonl/csv, samples in memory, system_message,
prompt_template, chain_of_thought, generate, multiple_choice). The items are this file's own."""

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample, csv_dataset, json_dataset
from inspect_ai.scorer import answer, choice, exact, f1, includes, match, pattern
from inspect_ai.solver import chain_of_thought, generate, multiple_choice, prompt_template, system_message


@task
def sums(numeric: bool = True) -> Task:
    """jsonl file dataset, a system message and a template, match() on numbers."""
    return Task(dataset=json_dataset("sums.jsonl"),
                solver=[system_message("Reply with the number only."), prompt_template("Compute: {prompt}"),
                        generate()],
                scorer=match(numeric=numeric))


@task
def sums_shown(shots: int = 2) -> Task:
    """Worked examples read from a second data file into the system message, as few-shot tasks do."""
    examples = json_dataset("sums_examples.jsonl", limit=shots)
    shown = "\n\n".join(f"{sample.input} = {sample.target}" for sample in examples)
    return Task(dataset=json_dataset("sums.jsonl"), solver=[system_message(shown), generate()],
                scorer=match(numeric=True))


@task
def colours() -> Task:
    """csv file dataset, includes()."""
    return Task(dataset=csv_dataset("colours.csv"), solver=generate(), scorer=includes())


@task
def opposites() -> Task:
    """Samples in memory (no ids: Assay hashes prompt and target), exact(); a list target."""
    return Task(dataset=[Sample(input="The opposite of hot?", target="cold"),
                         Sample(input="The opposite of up?", target="down"),
                         Sample(input="The opposite of early?", target=["late", "tardy"]),
                         Sample(input="The opposite of full?", target="empty")],
                solver=[generate()], scorer=exact())


@task
def titles() -> Task:
    """A MemoryDataset, f1() (partial credit), list targets."""
    return Task(dataset=MemoryDataset([
        Sample(id=1, input="Name the novel about a white whale.", target=["Moby Dick", "Moby-Dick; or, The Whale"]),
        Sample(id=2, input="Name the play about a Danish prince.", target="Hamlet, Prince of Denmark"),
        Sample(id=3, input="Name the novel about a boy wizard's first year.",
               target="Harry Potter and the Philosopher's Stone"),
    ]), solver=generate(), scorer=f1())


@task
def final_word() -> Task:
    """pattern() with one capture group, chain_of_thought() before generate()."""
    return Task(dataset=[Sample(id="p1", input="Is ice colder than steam? Say yes or no.", target="yes"),
                         Sample(id="p2", input="Is a cat a plant? Say yes or no.", target="no"),
                         Sample(id="p3", input="Is seven prime? Say yes or no.", target="yes")],
                solver=[chain_of_thought(), generate()], scorer=pattern(r"Final answer:\s*(\w+)"))


@task
def yes_no() -> Task:
    """answer('word'): the word after 'ANSWER:'."""
    return Task(dataset=[Sample(id="y1", input="Is water wet? End with ANSWER: yes or ANSWER: no.", target="yes"),
                         Sample(id="y2", input="Is fire cold? End with ANSWER: yes or ANSWER: no.", target="no")],
                solver=generate(), scorer=answer("word"))


@task
def planets() -> Task:
    """json file dataset with choices, multiple_choice() then choice()."""
    return Task(dataset=json_dataset("planets.json"), solver=multiple_choice(), scorer=choice())


@task
def planets_multi() -> Task:
    """Several correct choices: multiple_choice(multiple_correct=True) then choice()."""
    return Task(dataset=json_dataset("planets_multi.json"), solver=multiple_choice(multiple_correct=True),
                scorer=choice())
