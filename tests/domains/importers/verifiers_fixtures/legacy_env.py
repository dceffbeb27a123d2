"""Refused: a verifiers v0 environment (load_environment returning a SingleTurnEnv with a Rubric), which
verifiers 0.4.0 no longer ships."""

import verifiers as vf


def load_environment(num_examples: int = 4):
    parser = vf.XMLParser(["answer"])

    def correct(completion, answer, **kwargs) -> float:
        return float(parser.parse_answer(completion) == answer)

    return vf.SingleTurnEnv(dataset=None, parser=parser, rubric=vf.Rubric(funcs=[correct], weights=[1.0]))
