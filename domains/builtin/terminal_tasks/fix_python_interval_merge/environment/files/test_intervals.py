import unittest

from intervals import merge


class MergeTest(unittest.TestCase):
    def test_overlapping(self):
        self.assertEqual(merge([[1, 3], [2, 6], [8, 10]]), [[1, 6], [8, 10]])

    def test_unsorted_input(self):
        self.assertEqual(merge([[5, 7], [1, 2]]), [[1, 2], [5, 7]])

    def test_empty(self):
        self.assertEqual(merge([]), [])


if __name__ == "__main__":
    unittest.main()
