"""The environment report card: both error rates of a domain's verifier, measured.

A verifier errs two ways: it pays work that was not done (a false positive, a hack) and it refuses
work that was done (a false negative, a correct answer in a form the prompt allows). Every part
here scores candidate completions through ``Domain.safe_score_many``, as the trainer scores them,
so what the card reports is what GRPO would pay.

- :mod:`.recall`: correct answers in other forms (generic equivalence families built from the
  reference, plus the domain's own ``Domain.equivalents``) must score 1.0; recall with a Wilson
  interval and the worst family.
- :mod:`.hack_search`: a budgeted black-box search for paid completions, seeded from the prompt
  only; what it finds is kept per domain in the lake (``hack_corpus``) and replayed by the
  self-test from then on.
- :mod:`.mutants`: the strength of a domain's hidden tests (``code``, terminal task suites): the
  share of mutants of the reference solution the tests kill, weak items named.
- :mod:`.audit`: a labelling file of real sweep completions, and the false-positive and
  false-negative rates a person's labels give.
- :mod:`.card`: one row per domain (oracle pass, nop pass, recall, fixed families paid, hack
  search paid, mutation kill rate, audited rates, what the gates know), its verdict against the
  domain's bar, the lake table ``report_cards``.

Third-party packages are imported inside functions; nothing here imports dagster.
"""
