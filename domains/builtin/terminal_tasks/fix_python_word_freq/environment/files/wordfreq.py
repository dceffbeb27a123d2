"""Word frequencies of a text."""
import re


def words(text):
    """The words of text, in order: runs of the letters a-z (matched case-insensitively), lower-cased."""
    return re.findall(r"[a-z]+", text)


def top_words(text, n):
    """The n most frequent words of text as (word, count) pairs, most frequent first.

    Words with the same count are ordered alphabetically. Fewer than n pairs come back when the text
    has fewer than n distinct words.
    """
    counts = {}
    for word in words(text):
        counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts.items(), key=lambda pair: pair[1], reverse=True)
    return ranked[:n]
