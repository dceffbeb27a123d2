import unittest

from wordfreq import top_words, words


class WordFreqTest(unittest.TestCase):
    def test_words_are_lower_cased(self):
        self.assertEqual(words("The cat, the HAT."), ["the", "cat", "the", "hat"])

    def test_most_frequent_first(self):
        self.assertEqual(top_words("a b a c a b", 2), [("a", 3), ("b", 2)])

    def test_ties_are_alphabetical(self):
        self.assertEqual(top_words("pear fig apple fig pear apple kiwi", 3),
                         [("apple", 2), ("fig", 2), ("pear", 2)])

    def test_fewer_words_than_n(self):
        self.assertEqual(top_words("one two", 5), [("one", 1), ("two", 1)])


if __name__ == "__main__":
    unittest.main()
