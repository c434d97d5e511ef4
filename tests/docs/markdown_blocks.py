"""The fenced code blocks of a markdown document, with their doctest markers (README.md here).

A marker is an HTML comment on the line just before a fence, invisible on GitHub:

    <!-- doctest: run [needs=engines,shared,llama_cpp] [tolerance=R] [varies="PREFIX"]... -->
    <!-- doctest: output [tolerance=R] [varies="PREFIX"]... -->
    <!-- doctest: skip: REASON -->

A marker only says whether and how a block runs: the code that runs is all in the block, as
the reader sees it. A hidden block (a fence inside an HTML comment, such as the former
`<!-- doctest: setup`) is refused: an example shows everything it needs.
"""

import dataclasses
import re
import shlex

# Blocks of these languages are examples someone could paste: each must be run or skipped.
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
PYTHON_LANGUAGES = {"python", "py", "python3"}
NEEDS = {"engines", "shared", "llama_cpp"}

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>.*)$")
MARKER = re.compile(r"^\s*<!--\s*doctest:\s*(?P<body>.*?)\s*-->\s*$")
# A comment left open on its line: a fence inside it would run code the reader does not see.
HIDDEN_OPEN = re.compile(r"^\s*<!--(?!.*-->)")


class MarkupError(Exception):
    """A marker that is missing, malformed or in the wrong place; names the file and line."""


@dataclasses.dataclass
class Block:
    line: int  # 1-based line of the opening fence
    language: str  # "sh", "console" or "python"; other languages as written
    text: str  # the content, the fence's indentation removed
    action: str = ""  # "run", "output", "skip"; "" when unmarked
    reason: str = ""  # for "skip"
    needs: frozenset = frozenset()
    tolerance: float | None = None
    varies: tuple = ()
    expected: "Block | None" = None  # the output block that follows this one


def _language(info, text):
    """The block's language: its info string's first word; a bare fence holding a `$ `
    command line is a console session."""
    word = info.split()[0].lower() if info.split() else ""
    if word in SHELL_LANGUAGES - {"console"}:
        return "sh"
    if word in PYTHON_LANGUAGES:
        return "python"
    if word == "" and any(line.startswith("$ ") for line in text.splitlines()[:1]):
        return "console"
    return word


def _fenced_blocks(lines):
    """Yields (opening line index, closing line index, language, text) of every fence."""
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        closing = index + 1
        while closing < len(lines):
            match = FENCE.match(lines[closing])
            if (match and match["fence"][0] == fence[0] and len(match["fence"]) >= len(fence)
                    and not match["info"].strip()):
                break
            closing += 1
        # A fence indented in a list item: its lines lose up to that indentation.
        body = [line[min(indent, len(line) - len(line.lstrip())):]
                for line in lines[index + 1:closing]]
        text = "\n".join(body) + "\n" if body else ""
        yield index, closing, _language(opening["info"], text), text
        index = closing + 1


def _apply_options(block, words, where):
    for word in words:
        key, _, value = word.partition("=")
        if key == "needs" and block.action == "run":
            needs = frozenset(value.split(","))
            if not needs <= NEEDS:
                raise MarkupError(f"{where}: needs={value}: each must be one of {sorted(NEEDS)}")
            block.needs = needs
        elif key == "tolerance":
            block.tolerance = float(value)
        elif key == "varies" and value:
            block.varies += (value,)
        else:
            raise MarkupError(f"{where}: unknown doctest option {word!r}")


def _mark(block, body, where):
    if body.startswith("skip:"):
        block.action = "skip"
        block.reason = body[len("skip:"):].strip()
        if not block.reason:
            raise MarkupError(f"{where}: `doctest: skip:` needs a reason")
        return
    action, _, rest = body.partition(" ")
    if action not in ("run", "output"):
        raise MarkupError(f"{where}: unknown doctest marker {body!r} (run, output, skip: REASON)")
    block.action = action
    _apply_options(block, shlex.split(rest), where)


def _comment_open_at(lines, begin, end, open_comment):
    """Whether an HTML comment is still open after lines[begin:end] (text outside fences),
    given whether one was open before them."""
    for line in lines[begin:end]:
        position = 0
        while True:
            if open_comment:
                close = line.find("-->", position)
                if close < 0:
                    break
                open_comment, position = False, close + 3
            else:
                start = line.find("<!--", position)
                if start < 0:
                    break
                open_comment, position = True, start + 4
    return open_comment


def parse(path):
    """The document's blocks in order, markers applied and checked.

    Raises MarkupError for an unmarked shell or Python block, a marker with no block under
    it, an output block after anything but a run block, or a block hidden in an HTML comment
    (code a reader does not see: the former `doctest: setup`).
    """
    with open(path, encoding="utf-8") as file:
        lines = file.read().splitlines()
    blocks = []
    used_markers = set()
    inside_fences = set()
    open_comment, scanned = False, 0
    for opening, closing, language, text in _fenced_blocks(lines):
        open_comment = _comment_open_at(lines, scanned, opening, open_comment)
        scanned = closing + 1
        inside_fences.update(range(opening, closing + 1))
        where = f"{path}:{opening + 1}"
        if open_comment:
            raise MarkupError(f"{where}: a block inside an HTML comment is hidden from the reader; "
                              "show what an example needs in the example itself "
                              "(tests/docs/README.md)")
        block = Block(line=opening + 1, language=language, text=text)
        marker = MARKER.match(lines[opening - 1]) if opening > 0 else None
        if marker:
            _mark(block, marker["body"], where)
            used_markers.add(opening - 1)
        if block.action == "" and language in SHELL_LANGUAGES | {"python"}:
            raise MarkupError(f"{where}: unmarked {language} block: precede it with "
                              "`<!-- doctest: run -->` or `<!-- doctest: skip: REASON -->` "
                              "(tests/docs/README.md)")
        if block.action == "run" and language not in ("sh", "console", "python"):
            raise MarkupError(f"{where}: cannot run a {language or 'plain'} block")
        if block.action == "output":
            previous = blocks[-1] if blocks else None
            if previous is None or previous.action != "run" or previous.language == "console":
                raise MarkupError(f"{where}: an output block must follow a run block of sh or "
                                  "python (a console block holds its own output)")
            previous.expected = block
        blocks.append(block)
    for index, line in enumerate(lines):
        if index in used_markers or index in inside_fences:
            continue
        if MARKER.match(line) or HIDDEN_OPEN.match(line) and "doctest" in line:
            raise MarkupError(f"{path}:{index + 1}: a doctest marker must be on the line "
                              "just before a fence")
    return blocks
