"""Whether a command's output matches the output a document shows (tests/docs/README.md).

Lines are compared after trimming trailing spaces and trailing blank lines. Text between
numbers must be equal; an integer must be equal; a number with a fraction or an exponent
may differ by the relative tolerance. An expected line `...` stands for any number of lines
(none too); on a line that starts with a `varies` prefix any number matches any number
(timings, timestamps).
"""

import difflib
import functools
import re

DEFAULT_TOLERANCE = 1e-3
ELISION = "..."
NUMBER = re.compile(r"\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?")


def _split(line):
    """(texts, numbers): the text around each number, and the numbers as written."""
    return NUMBER.split(line), NUMBER.findall(line)


def _numbers_match(expected, actual, tolerance):
    if expected == actual:
        return True
    if not any(mark in expected for mark in ".eE"):
        return False
    scale = max(abs(float(expected)), abs(float(actual)))
    return abs(float(expected) - float(actual)) <= tolerance * scale


def line_matches(expected, actual, tolerance=DEFAULT_TOLERANCE, varies=()):
    expected_texts, expected_numbers = _split(expected)
    actual_texts, actual_numbers = _split(actual)
    if expected_texts != actual_texts:
        return False
    if any(expected.startswith(prefix) for prefix in varies):
        return True
    return all(_numbers_match(e, a, tolerance) for e, a in zip(expected_numbers, actual_numbers))


def _lines(text):
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def matches(expected_text, actual_text, tolerance=DEFAULT_TOLERANCE, varies=()):
    """Whether actual_text is what expected_text shows, elisions and tolerances applied."""
    expected, actual = _lines(expected_text), _lines(actual_text)

    @functools.cache
    def match_from(e, a):
        if e == len(expected):
            return a == len(actual)
        if expected[e].strip() == ELISION:
            return any(match_from(e + 1, rest) for rest in range(a, len(actual) + 1))
        return (a < len(actual) and line_matches(expected[e], actual[a], tolerance, varies)
                and match_from(e + 1, a + 1))

    return match_from(0, 0)


def diff(expected_text, actual_text):
    """A unified diff from the document's output to the actual one."""
    return "\n".join(difflib.unified_diff(_lines(expected_text), _lines(actual_text),
                                          "shown in the document", "printed", lineterm=""))
