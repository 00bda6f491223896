"""Pull runnable Python out of a model's answer to a HumanEval problem.

The original sweep lost points to an extraction bug, so this is strict about what it accepts and
generous about the shapes it survives: reasoning blocks (<think>...</think>, also unclosed),
fenced blocks with or without a language (``` or ~~~, indented fences, an unterminated last fence),
several blocks (the last one defining the entry point wins, other languages are skipped),
no fences at all with prose before and after, a body without its `def` line, and whole answers
indented by a list or a quote. `ast.parse` is the judge of what is code.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>|◁think▷.*?◁/think▷", re.S | re.I)
THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)>|◁/think▷", re.I)
FENCE_OPEN = re.compile(r"^(?P<indent>[ \t>]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")
PY_LANGS = {"", "python", "py", "python3", "py3", "ipython", "pycon"}
CODE_START = re.compile(r"^\s*(def |async def |class |import |from \S+ import |@\w)")


@dataclass
class Block:
    language: str
    code: str


def strip_reasoning(text: str) -> str:
    """Drop reasoning blocks; with an unclosed one, keep what follows the last closing tag if any."""
    text = THINK_BLOCK.sub("", text)
    closes = list(THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    return re.sub(r"<(think|thinking|reasoning)>|◁think▷", "", text, flags=re.I)


def fenced_blocks(text: str) -> list[Block]:
    """Markdown fenced blocks in order; an unterminated last block runs to the end of the text."""
    blocks: list[Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        fence, indent = match.group("fence"), match.group("indent")
        language = match.group("info").strip().split()[0].lower() if match.group("info").strip() else ""
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = re.match(rf"^[ \t>]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", lines[i])
            if close:
                break
            line = lines[i]
            if indent and line.startswith(indent):
                line = line[len(indent) :]
            elif ">" in indent:  # quoted block: strip the quote marks however they are spaced
                line = re.sub(r"^[ \t]*>[ \t]?", "", line)
            body.append(line)
            i += 1
        i += 1
        blocks.append(Block(language, textwrap.dedent("\n".join(body)).strip("\n")))
    return blocks


def parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def defines(code: str, name: str) -> bool:
    """True when the code defines function `name` at any level (ast first, regex if it won't parse)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return re.search(rf"^\s*(async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
        for node in ast.walk(tree)
    )


def code_from_prose(text: str) -> str:
    """Without fences: the longest stretch that starts at a code-looking line and parses."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if CODE_START.match(line)]
    best = ""
    for start in starts:
        for end in range(len(lines), start, -1):
            candidate = textwrap.dedent("\n".join(lines[start:end])).strip("\n")
            if len(candidate) <= len(best):
                break
            if parses(candidate):
                best = candidate
                break
    return best


KEPT_STATEMENTS = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.Try,
)


def keep_definitions(code: str) -> str:
    """Keep imports, definitions and constants; drop top-level calls, asserts, prints and main blocks.

    A model's own example calls and asserts are not the benchmark's tests: a wrong example would fail
    a correct solution, and prose that happens to parse (`Complexity: O(n)`) would crash it.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    lines = code.split("\n")
    kept: list[str] = []
    for node in tree.body:
        if not isinstance(node, KEPT_STATEMENTS):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        kept.append("\n".join(lines[first - 1 : node.end_lineno]))
    return "\n\n".join(kept) + "\n" if kept else ""


def _as_body(body: str) -> list[str]:
    """A function body the model wrote without its def line, indented the two plausible ways."""
    body = body.strip("\n")
    lines = body.split("\n")
    variants = [textwrap.indent(textwrap.dedent(body), "    ")]
    if len(lines) > 1 and not lines[0].startswith((" ", "\t")):
        variants.append("    " + lines[0] + "\n" + "\n".join(lines[1:]))
    return variants


def prompt_header(prompt: str) -> str:
    """The problem's imports and helper code: everything before its last top-level def."""
    matches = list(re.finditer(r"^def \w+\s*\(", prompt, re.M))
    return prompt[: matches[-1].start()] if matches else ""


def extract_code(answer: str, entry_point: str, prompt: str = "") -> str:
    """The program to run before the tests: a full definition of `entry_point` (with the prompt's
    imports), or the prompt plus a body. Returns '' when nothing usable is found."""
    text = strip_reasoning(answer).replace("\r\n", "\n")
    blocks = [b for b in fenced_blocks(text) if b.language in PY_LANGS and b.code.strip()]
    candidates = [b.code for b in blocks]
    if not candidates:
        prose_code = code_from_prose(text)
        candidates = [prose_code] if prose_code else []
    defining = [c for c in candidates if defines(c, entry_point)]
    if defining:
        code = defining[-1]
        header = prompt_header(prompt)
        # The prompt's imports (typing.List, math, ...) must be there; they are harmless if repeated.
        program = f"{header}{code}\n" if header and not code.startswith(header) else f"{code}\n"
        return keep_definitions(program)
    if not prompt:
        return keep_definitions(candidates[-1]) if candidates else ""
    bodies = candidates or ([text.strip()] if text.strip() else [])
    for body in reversed(bodies):
        for variant in _as_body(body):
            program = prompt.rstrip("\n") + "\n" + variant + "\n"
            if parses(program):
                return keep_definitions(program)
    return ""
