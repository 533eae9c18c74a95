"""Tokens of the comprehension language.

Identifiers, integer and float literals (a literal with '.' or an exponent is a
float; the words `inf` and `nan` are identifiers here, float literals to the
parser: literals.py), punctuation, and the statement operators `=`, `+=`, `*=`,
`max=`, `min=` each with an optional adjacent `!`, and the tuple reductions
`argmax=!`, `argmin=!`, `welford=!`, `expsum=!` (monoids.py). `#` starts a comment to the
end of the line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import LangError
from .source import Loc, Source

KEYWORDS = {"def", "where", "in", "exists"}
MONOID_WORDS = ("argmax", "argmin", "welford", "expsum")  # monoids.MONOIDS

# Longest first: the scanner tries these in order.
PUNCT = ("<=>", "+=!", "*=!", "->", "==", "!=", "<=", ">=", "&&", "||", "+=", "*=",
         "(", ")", "{", "}", ",", ":", "?", "<", ">", "!", "+", "-", "*", "/", "%", "=", ";")

_FLOAT = re.compile(r"(\d+\.\d*|\.\d+)([eE][+-]?\d+)?|\d+[eE][+-]?\d+")
_INT = re.compile(r"\d+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_SPACE = re.compile(r"[ \t\r\f\v]+")


@dataclass(frozen=True)
class Token:
    kind: str  # 'ident', 'int', 'float', 'op' (punctuation / operators), 'keyword', 'eof'
    text: str
    loc: Loc

    def is_op(self, *texts: str) -> bool:
        return self.kind == "op" and self.text in texts

    def is_kw(self, text: str) -> bool:
        return self.kind == "keyword" and self.text == text

    def describe(self) -> str:
        return "end of input" if self.kind == "eof" else f"'{self.text}'"


def tokenize(source: Source) -> list[Token]:
    text = source.text
    toks: list[Token] = []
    i, line, line_start = 0, 1, 0
    n = len(text)
    while i < n:
        c = text[i]
        loc = Loc(source, line, i - line_start + 1)
        if c == "\n":
            i += 1
            line += 1
            line_start = i
            continue
        m = _SPACE.match(text, i)
        if m:
            i = m.end()
            continue
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        m = _FLOAT.match(text, i)
        if m:
            j = m.end()
            if j < n and (text[j].isalpha() or text[j] == "_"):
                raise LangError(f"invalid number literal '{text[i:j + 1]}'", loc)
            toks.append(Token("float", text[i:j], loc))
            i = j
            continue
        m = _INT.match(text, i)
        if m:
            j = m.end()
            if j < n and (text[j].isalpha() or text[j] == "_"):
                raise LangError(f"invalid number literal '{text[i:j + 1]}'", loc)
            toks.append(Token("int", m.group(), loc))
            i = j
            continue
        m = _IDENT.match(text, i)
        if m:
            word = m.group()
            j = m.end()
            # `max=` / `min=` (but not `max==`) are reduction operators, and so are the
            # tuple reductions' `argmax=!` ... (monoids.py; only in their `!` form).
            if word in MONOID_WORDS and text.startswith("=!", j):
                toks.append(Token("op", word + "=!", loc))
                j += 2
            elif word in ("max", "min") and text.startswith("=", j) and not text.startswith("==", j):
                op = word + "="
                j += 1
                if text.startswith("!", j):
                    op += "!"
                    j += 1
                toks.append(Token("op", op, loc))
            else:
                toks.append(Token("keyword" if word in KEYWORDS else "ident", word, loc))
            i = j
            continue
        for p in PUNCT:
            if text.startswith(p, i):
                toks.append(Token("op", p, loc))
                i += len(p)
                break
        else:
            shown = c if c.isprintable() else repr(c)[1:-1]  # '\x00', not ''\x00''
            raise LangError(f"unexpected character '{shown}'", loc)
    toks.append(Token("eof", "", Loc(source, line, i - line_start + 1)))
    return toks
