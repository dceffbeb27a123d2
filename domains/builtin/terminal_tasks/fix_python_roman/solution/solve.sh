#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
cat > roman.py <<'EOF'
"""Roman numerals for the integers 1 to 3999."""

VALUES = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
          (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(number):
    """The Roman numeral of number, in standard subtractive form.

    4 is IV, 9 is IX, 40 is XL, 90 is XC, 400 is CD and 900 is CM, so 1994 is MCMXCIV.
    Raises ValueError when number is not between 1 and 3999 (inclusive).
    """
    if number < 1 or number > 3999:
        raise ValueError(f"out of range: {number}")
    parts = []
    for value, letters in VALUES:
        while number >= value:
            parts.append(letters)
            number -= value
    return "".join(parts)


def from_roman(numeral):
    """The integer value of a numeral in standard form (upper case): the inverse of to_roman."""
    single = {"M": 1000, "D": 500, "C": 100, "L": 50, "X": 10, "V": 5, "I": 1}
    total = 0
    for i, letter in enumerate(numeral):
        value = single[letter]
        if i + 1 < len(numeral) and single[numeral[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
EOF
python3 test_roman.py
