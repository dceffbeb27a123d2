"""Merging closed integer intervals."""


def merge(intervals):
    """Merge overlapping closed intervals.

    intervals is a list of [start, end] pairs (start <= end) in any order. Returns a new list of
    [start, end] pairs sorted by start in which no two intervals overlap or touch: [1, 3] and [2, 6]
    merge into [1, 6], [1, 3] and [3, 5] merge into [1, 5], [1, 10] and [2, 3] merge into [1, 10],
    while [1, 2] and [4, 5] stay apart. The input list and its pairs are not modified.
    """
    result = []
    for start, end in intervals:
        if result and start < result[-1][1]:
            result[-1][1] = end
        else:
            result.append([start, end])
    return result
