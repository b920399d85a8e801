"""ComfyUI's prompt-weight syntax for CLIPTextEncode: `(text)`, `(text:1.3)`, escaped `\\(` `\\)`.

Behaviour re-implemented from ComfyUI's `comfy/sd1_clip.py` (`parse_parentheses`,
`token_weights`, `escape_important`): this is *not* AUTOMATIC1111's syntax (no `[...]`, no
BREAK, no normalisation; that lives in `comfy_core/prompt/`).

- The text is split into top-level parenthesised groups and plain runs. Parentheses nest;
  an unmatched `)` at top level drives the depth negative, and the rest of the text stays one
  plain run (ComfyUI does the same; we keep that for identical results on odd prompts).
- A group `(x)` multiplies the current weight by 1.1; `(x:w)` *replaces* it with `w` when the text
  after the last `:` parses as a float, else the colon stays part of the text (still x1.1).
- Weights apply recursively to nested groups.
"""
from __future__ import annotations

# Placeholders for escaped brackets: control characters that cannot come from a normal prompt.
_ESC_CLOSE = "\0\1"
_ESC_OPEN = "\0\2"


def escape_important(text: str) -> str:
    r"""Hide `\(` and `\)` from the bracket parser."""
    return text.replace("\\)", _ESC_CLOSE).replace("\\(", _ESC_OPEN)


def unescape_important(text: str) -> str:
    """Turn the hidden escaped brackets back into literal `(` and `)`."""
    return text.replace(_ESC_CLOSE, ")").replace(_ESC_OPEN, "(")


def split_parentheses(text: str) -> list[str]:
    """Split into top-level `( ... )` groups (kept with their brackets) and plain runs."""
    parts: list[str] = []
    current = ""
    depth = 0
    for char in text:
        if char == "(":
            if depth == 0:
                if current:
                    parts.append(current)
                current = "("
            else:
                current += char
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                parts.append(current + ")")
                current = ""
            else:
                current += char
        else:
            current += char
    if current:
        parts.append(current)
    return parts


def parse_weights(text: str, weight: float = 1.0) -> list[tuple[str, float]]:
    """Segments of (escaped) `text` with their weights, in order. See the module docstring."""
    out: list[tuple[str, float]] = []
    for part in split_parentheses(text):
        if len(part) >= 2 and part[0] == "(" and part[-1] == ")":
            inner = part[1:-1]
            inner_weight = weight * 1.1
            colon = inner.rfind(":")
            if colon > 0:
                try:
                    inner_weight = float(inner[colon + 1:])
                    inner = inner[:colon]
                except ValueError:
                    pass  # not a weight: the colon is ordinary text
            out.extend(parse_weights(inner, inner_weight))
        else:
            out.append((part, weight))
    return out
