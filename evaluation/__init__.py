"""Evaluation: benchmark sweeps of checkpoints (:mod:`evaluation.sweep`), paired per-domain
regression statistics (:mod:`evaluation.regression`), whether two sweeps can be compared
(:mod:`evaluation.comparability`), and the promotion policy and decision
(:mod:`evaluation.promotion_policy`, :mod:`evaluation.promotion`)."""
