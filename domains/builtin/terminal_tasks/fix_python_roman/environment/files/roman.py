"""Roman numerals for the integers 1 to 3999."""

VALUES = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


def to_roman(number):
    """The Roman numeral of number, in standard subtractive form.

    4 is IV, 9 is IX, 40 is XL, 90 is XC, 400 is CD and 900 is CM, so 1994 is MCMXCIV.
    Raises ValueError when number is not between 1 and 3999 (inclusive).
    """
    if number < 0 or number > 4000:
        raise ValueError(f"out of range: {number}")
    parts = []
    for value, letters in VALUES:
        while number >= value:
            parts.append(letters)
            number -= value
    return "".join(parts)


def from_roman(numeral):
    """The integer value of a numeral in standard form (upper case): the inverse of to_roman."""
    symbol_values = {letters: value for value, letters in VALUES}
    total = 0
    for letter in numeral:
        total += symbol_values[letter]
    return total
