import unittest

from roman import from_roman, to_roman


class RomanTest(unittest.TestCase):
    def test_additive(self):
        self.assertEqual(to_roman(3), "III")

    def test_subtractive(self):
        self.assertEqual(to_roman(1994), "MCMXCIV")

    def test_parse(self):
        self.assertEqual(from_roman("XLII"), 42)

    def test_zero_is_out_of_range(self):
        with self.assertRaises(ValueError):
            to_roman(0)


if __name__ == "__main__":
    unittest.main()
