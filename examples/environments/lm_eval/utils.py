"""Hooks of the arith_words task (lm-eval's `!function utils.doc_to_text`)."""


def doc_to_text(doc: dict) -> str:
    return (f"Question: {doc['question']}\n"
            "Work it out step by step, then end with a line holding the word Answer, a colon and the result "
            "(a number, or one word).\n")
