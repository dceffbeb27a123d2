"""The reasoning-gym pack: every reasoning-gym task as its own domain, ``rg_<task>``.

Each domain draws items from the task's procedural generator at its default difficulty (except
the few in ``TASK_CONFIGS``, whose defaults are impractically slow to generate) and
scores completions with the task's own verifier (``dataset.score_answer``), wrapped so that it
never raises. Splits are assigned by hashing each item's question (see ``_common``), so an item
can never be in both train and eval. The task list is static so that loading the registry does not
import reasoning_gym (it costs ~1 s); ``tests/domains/test_reasoning_gym_pack.py`` checks that the
list matches the installed package.

Excluded tasks are listed in ``EXCLUDED`` with the reason; slow generators get a smaller
``eval_size`` (``EVAL_SIZES``) and the tag ``slow-generation`` so that ingesting every domain
stays fast.
"""

from __future__ import annotations

from domains import Domain
from domains.builtin._common import stream_split
from domains.builtin._rg import draw_entries, score_with_verifier
from domains.builtin._rg_equivalents import task_equivalents

OWNER = "reasoning-gym-team@assay.dev"
EVAL_SHARE = 0.5

# task -> category (the reasoning_gym subpackage), as in reasoning-gym 0.1.25.
TASKS: dict[str, str] = {
    "ab": "algorithmic",
    "acre": "induction",
    "advanced_geometry": "geometry",
    "aiw": "logic",
    "arc_1d": "arc",
    "arc_agi": "arc",
    "base_conversion": "algorithmic",
    "basic_arithmetic": "arithmetic",
    "bf": "code",
    "binary_alternation": "algorithmic",
    "binary_matrix": "algorithmic",
    "bitwise_arithmetic": "arithmetic",
    "boxnet": "games",
    "caesar_cipher": "algorithmic",
    "calendar_arithmetic": "arithmetic",
    "chain_sum": "arithmetic",
    "circuit_logic": "logic",
    "codeio": "code",
    "coin_flip": "probability",
    "color_cube_rotation": "cognition",
    "complex_arithmetic": "algebra",
    "composite": "composite",
    "count_bits": "arithmetic",
    "count_primes": "algorithmic",
    "countdown": "games",
    "course_schedule": "graphs",
    "cryptarithm": "algorithmic",
    "decimal_arithmetic": "arithmetic",
    "decimal_chain_sum": "arithmetic",
    "dice": "arithmetic",
    "emoji_mystery": "games",
    "family_relationships": "graphs",
    "figlet_font": "cognition",
    "fraction_simplification": "arithmetic",
    "futoshiki": "games",
    "game_of_life": "algorithmic",
    "game_of_life_halting": "algorithmic",
    "gcd": "arithmetic",
    "graph_color": "algorithmic",
    "group_anagrams": "algorithmic",
    "gsm_symbolic": "arithmetic",
    "intermediate_integration": "algebra",
    "isomorphic_strings": "algorithmic",
    "jugs": "algorithmic",
    "kakurasu": "games",
    "knight_swap": "games",
    "knights_knaves": "logic",
    "largest_island": "graphs",
    "lcm": "arithmetic",
    "leg_counting": "arithmetic",
    "letter_counting": "algorithmic",
    "letter_jumble": "algorithmic",
    "list_functions": "induction",
    "mahjong_puzzle": "games",
    "manipulate_matrix": "algorithmic",
    "maze": "games",
    "mini_sudoku": "games",
    "modulo_grid": "cognition",
    "n_queens": "games",
    "needle_haystack": "cognition",
    "number_filtering": "algorithmic",
    "number_format": "arithmetic",
    "number_sequence": "cognition",
    "number_sorting": "algorithmic",
    "palindrome_generation": "algorithmic",
    "palindrome_partitioning": "algorithmic",
    "path_star": "graphs",
    "polynomial_equations": "algebra",
    "polynomial_multiplication": "algebra",
    "pool_matrix": "algorithmic",
    "power_function": "arithmetic",
    "prime_factorization": "arithmetic",
    "products": "arithmetic",
    "propositional_logic": "logic",
    "puzzle24": "games",
    "quantum_lock": "graphs",
    "ransom_note": "algorithmic",
    "rearc": "arc",
    "rectangle_count": "cognition",
    "rotate_matrix": "algorithmic",
    "rotten_oranges": "algorithmic",
    "rubiks_cube": "cognition",
    "rush_hour": "games",
    "self_reference": "logic",
    "sentence_reordering": "algorithmic",
    "shortest_path": "graphs",
    "simple_equations": "algebra",
    "simple_geometry": "geometry",
    "simple_integration": "algebra",
    "sokoban": "games",
    "spell_backward": "algorithmic",
    "spiral_matrix": "algorithmic",
    "string_insertion": "algorithmic",
    "string_manipulation": "algorithmic",
    "string_splitting": "algorithmic",
    "string_synthesis": "algorithmic",
    "sudoku": "games",
    "survo": "games",
    "syllogism": "logic",
    "time_intervals": "arithmetic",
    "tower_of_hanoi": "games",
    "tsumego": "games",
    "word_ladder": "algorithmic",
    "word_sequence_reversal": "algorithmic",
    "word_sorting": "algorithmic",
    "zebra_puzzles": "logic",
}

# Tasks not registered, and why (found by `assay domains check --all`).
EXCLUDED: dict[str, str] = {
    "composite": "a meta-dataset that mixes other tasks; it needs a list of datasets to build and "
                 "every one of them is already a domain of its own",
    "codeio": "not deterministic: generation executes the dataset's Python snippets in-process "
              "and some depend on state outside any seed (two eval_items() calls at n=200 differ "
              "even with the global RNGs seeded per item); also ~50 ms per item",
    "knight_swap": "too slow to generate: each item is a rejection search for a solvable board, "
                   "0.4-0.8 s per item even at easier settings; 10 eval + 64 train items took "
                   "143 s, a third of the time all other domains together took",
    "rush_hour": "no reference answer: items carry only the board and the minimum number of moves, "
                 "any valid move sequence is accepted, so no answer can be checked to score 1.0",
    "boxnet": "no reference answer: the verifier accepts any plan that moves every box to its "
              "target, and items carry no solution to check the verifier against",
}

# Seconds per generated item measured here (2 shared cores) decide these: eval generation draws
# ~2 items per kept one, and ingesting every domain must stay fast. Default: DEFAULT_EVAL_SIZE.
EVAL_SIZES: dict[str, int] = {
    "futoshiki": 60,  # ~45 ms at up to 6x6 (TASK_CONFIGS)
    "zebra_puzzles": 40,  # ~80 ms
    "puzzle24": 40,  # ~50 ms
    "intermediate_integration": 40,  # ~50 ms (sympy)
    "sokoban": 40,  # ~40 ms
    "sudoku": 100,  # ~22 ms
    "countdown": 100,  # ~16 ms
    "quantum_lock": 100,  # ~16 ms
    "rubiks_cube": 100,  # ~14 ms
    "polynomial_equations": 100,  # ~11 ms (sympy)
    # ~35 ms per kept item: ~3% of generated items show an inference (_rg.conclusion_defect)
    "propositional_logic": 100,
}


# Difficulty overrides, only where the default makes generation impractical.
TASK_CONFIGS: dict[str, dict] = {
    # 7x7-9x9 boards take ~0.5 s each to generate (and are far beyond a 135M policy); up to 6x6: ~0.04 s
    "futoshiki": {"max_board_size": 6},
}
# Domains with a reduced eval set carry this tag, so a demo can sample fewer train items there.
SLOW_TAG = "slow-generation"


def _make_samples(task: str):
    config = TASK_CONFIGS.get(task, {})

    def samples(split: str, n: int, seed: int):
        draws = draw_entries(task, config, n, split, seed)
        yield from stream_split(f"rg_{task}", split, n, seed, draws, eval_share=EVAL_SHARE,
                                max_draws=4 * n + 40)

    return samples


def _make_score(task: str):
    def score(completion: str, sample: dict) -> float:
        return score_with_verifier(completion, sample, task=task)

    return score


def _domain(task: str, category: str) -> Domain:
    return Domain(
        name=f"rg_{task}",
        owner=OWNER,
        description=f"reasoning-gym '{task}' ({category}) at its "
                    f"{'default' if task not in TASK_CONFIGS else 'reduced'} difficulty, scored by "
                    "the task's own verifier",
        tags=("reasoning-gym", category) + ((SLOW_TAG,) if task in EVAL_SIZES else ()),
        samples=_make_samples(task),
        score=_make_score(task),
        eval_size=EVAL_SIZES.get(task, 200),
        equivalents=task_equivalents(task),
    )


DOMAINS = [_domain(task, category) for task, category in TASKS.items() if task not in EXCLUDED]
