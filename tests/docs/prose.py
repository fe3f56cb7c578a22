"""Prose figures: every measured or modeled figure a page states outside its code blocks names
the output it comes from, in an HTML comment right after it (invisible on GitHub), and
run_docs.py checks it against that output and rewrites it with --update.

A source is an output: a block's command (`<!-- docs: name=ddp -->` before the fence names it;
`name=off,on` names a block's commands in order), or a command the page does not show, on a line
of its own: `<!-- docs: source=big ./build/mgpu run ddp --layers 24 -->` (options such as `slow`
may come before `source=`). A figure's comment, right after it (no space between):

  1.751 ms<!-- pcie: /step: {t} here/ -->        the first group of a regex over pcie's output
  3.00x<!-- s_on = on: /speedup ({n}x)/ -->      the same, and the value is named s_on
  303.711 us<!-- = us(off) - us(on) | {:.3f} us -->   an expression over named values, formatted
  `step: 1.751 ms here vs 791.193 us`<!-- pcie -->   a code span quoted from pcie's output
  25 MB<!-- const -->                            a constant: a spec, a formula's, a citation
  <!-- let G = main: /all-reduced +({n}) B/ -->  names a value the prose does not show

In a regex, `{n}` is a figure as the programs print it (1,234 / 0.5 / 9.43e-06) and `{t}` a time
with its unit (`577.348 us`, `1.2 ms`); each is a group, and the first group is the figure (the
whole match without one). The regex finds its first match in the output (lines joined by
newlines, `^`/`$` per line). A name's value is its figure's number; in an expression `us(x)`,
`ms(x)`, `s(x)` convert a time by its printed unit and `B(x)` a size (KiB, MB, ...) to bytes.
The figure in the prose is the text before the comment shaped like the new one (same words and
units, any digits; a time may change its unit): the check fails when the two differ, and
--update writes the new one. A figure is checked when its blocks run: one from a slow block
with --slow. A wall-clock block (`wall`, `--clock wall`) is no source: its figures change every
run; a page quotes such a measurement as a constant, saying where and when it was taken.

The lint: a figure with a unit (ms, us, s, KiB, MB, GB/s, %, x, ...) in the prose, code spans
included, with none of these comments fails. `<!-- docs: const REASON -->` on a line of its own
marks the paragraph or table below it (to the next blank line) as constants: a recorded
measurement, a table of hardware specs.
"""
import re

FIGURE = r"\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
TIME_UNITS = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}  # to microseconds
SIZE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KiB": 2**10, "MiB": 2**20,
              "GiB": 2**30, "TiB": 2**40}
TIME = FIGURE + r" ?(?:ns|us|µs|ms|s)\b"
PLACEHOLDERS = {"{n}": f"(-?{FIGURE})", "{t}": f"({TIME})"}
# A figure with a unit, for the lint ("8xH100" and "fp16" are no figures; "2 x 3" is a product).
UNIT_FIGURE = re.compile(r"(?<![\w.,/])" + FIGURE +
                         r"(?:%|[x×](?!\w)| ?(?:[nuµm]?s|[KMGT]i?B|[KMGT]?B/s|[KMGTP]?FLOP/s)"
                         r"(?![\w/]))")
COMMENT = re.compile(r"<!--\s*(.*?)\s*-->")
NAME = r"[A-Za-z_][\w.-]*"
REGEX_SOURCE = re.compile(rf"^(?:(?:let )?({NAME}) = )?({NAME}): /(.*)/$")
EXPRESSION = re.compile(r"^(?:(" + NAME + r") )?= (.+?) \| (.+)$")
CONST = re.compile(r"^const\b")
CONST_PARAGRAPH = re.compile(r"^\s*<!--\s*docs:\s*const\b.*-->\s*$")
CODE_SPAN_END = re.compile(r"`([^`]+)`$")
LINK_TARGET = re.compile(r"\]\([^)]*\)")


class Figure:
    """One sourced figure in the prose: line index, where its comment starts and ends, and what
    it says."""

    def __init__(self, page, index, start, end, kind, spec):
        self.page, self.index, self.start, self.end = page, index, start, end
        self.kind, self.spec = kind, spec  # kind: regex, let, expression, quote

    @property
    def where(self):
        return f"{self.page}:{self.index + 1}"


class Value(float):
    """A captured figure: its number (with its sign: `-1.8%` is -1.8, `a-1` is 1), and its text
    (for the unit)."""

    def __new__(cls, text):
        number = re.search(r"(?<![\w.])-?" + FIGURE, text)
        value = float.__new__(cls, number.group().replace(",", "") if number else "nan")
        value.text = text
        return value


def converter(units):
    def convert(value):
        m = re.search(f"({FIGURE}) ?({'|'.join(units)})\\b", getattr(value, "text", ""))
        if not m:
            raise ValueError(f"'{getattr(value, 'text', value)}' has no unit of {sorted(units)}")
        return float(m.group(1).replace(",", "")) * units[m.group(2)]
    return convert


def to_us(v):
    return converter(TIME_UNITS)(v)


HELPERS = {"us": to_us, "ms": lambda v: to_us(v) / 1e3, "s": lambda v: to_us(v) / 1e6,
           "B": converter(SIZE_UNITS), "abs": abs, "min": min, "max": max, "round": round}


def prose_lines(lines):
    """Indices of the lines outside fenced blocks, and whether each is in a const paragraph."""
    inside, const, result = False, False, []
    for i, line in enumerate(lines):
        if line.startswith("```"):
            inside = not inside
            continue
        if inside:
            continue
        if CONST_PARAGRAPH.match(line):
            const = True
        elif not line.strip():
            const = False
        result.append((i, const))
    return result


def kind_of(spec, before):
    """What a comment after `before` says: regex, let, expression, quote, const or None."""
    if REGEX_SOURCE.match(spec):
        return "let" if spec.startswith("let ") else "regex"
    if EXPRESSION.match(spec):
        return "expression"
    if re.fullmatch(NAME, spec) and CODE_SPAN_END.search(before) and spec != "const":
        return "quote"
    return "const" if CONST.match(spec) else None


def parse_figures(page, lines):
    """The page's sourced figures, and the lint's findings: (figures, [error, ...])."""
    figures, errors = [], []
    for i, const in prose_lines(lines):
        line = lines[i]
        kept, cursor = "", 0  # the line without comments and the figures they source or mark
        for m in COMMENT.finditer(line):
            spec, before = m.group(1), line[cursor : m.start()]
            kind = kind_of(spec, before)
            code_span = CODE_SPAN_END.search(before)
            if kind == "quote" or (kind == "const" and code_span):
                before = before[: code_span.start()]
            elif kind is not None:  # the lint skips the figure before the comment
                before = re.sub(UNIT_FIGURE.pattern + "$", "", before)
            if kind not in (None, "const"):
                figures.append(Figure(page, i, m.start(), m.end(), kind, spec))
            if kind is not None and "--" in spec:  # not a comment to GitHub inside a paragraph
                errors.append(f"{page}:{i + 1}: `--` in <!-- {spec} -->: GitHub would show it")
            kept += before
            cursor = m.end()
        kept += line[cursor:]
        if const or kept.lstrip().startswith("<!--"):
            continue
        for m in UNIT_FIGURE.finditer(LINK_TARGET.sub("", kept)):
            errors.append(f"{page}:{i + 1}: prose figure '{m.group()}' has no source: add "
                          "<!-- BLOCK: /REGEX/ --> after it, or <!-- const --> (tests/docs/prose.py)")
    return figures, errors


def compile_regex(text):
    for placeholder, pattern in PLACEHOLDERS.items():
        text = text.replace(placeholder, pattern)
    return re.compile(text, re.MULTILINE)


def shaped_like(text):
    """A regex for text of the same shape: any digits, a time in any unit."""
    pattern, cursor = "", 0
    for m in re.finditer(f"({FIGURE})( ?(?:ns|us|µs|ms|s)\\b)?", text):
        pattern += re.escape(text[cursor : m.start()])
        pattern += f"-?{FIGURE}" + (r" ?(?:ns|us|µs|ms|s)\b" if m.group(2) else "")
        cursor = m.end()
    return pattern + re.escape(text[cursor:])


def source_of(figure):
    """The block names a figure's value comes from (directly)."""
    if figure.kind == "quote":
        return figure.spec
    return REGEX_SOURCE.match(figure.spec).group(2)


def capture(figure, outputs):
    """The text a regex source gives, from its block's output."""
    block, regex = REGEX_SOURCE.match(figure.spec).group(2, 3)
    found = compile_regex(regex).search("\n".join(outputs[block]))
    if not found:
        raise ValueError(f"{block}'s output has no match for /{regex}/")
    return found.group(1) if found.re.groups else found.group()


def dependencies(figures):
    """For each figure, the set of blocks it needs (an expression: those of its names; an
    unknown name as `?name`)."""
    deps, named = {}, {}
    for f in figures:
        if f.kind != "expression":
            deps[f] = {source_of(f)}
            name = REGEX_SOURCE.match(f.spec).group(1) if f.kind != "quote" else None
            if name:
                named[name] = deps[f]
    for f in figures:
        if f.kind == "expression":
            name, expression, _ = EXPRESSION.match(f.spec).groups()
            words = set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", expression)) - set(HELPERS)
            deps[f] = set().union(*[named.get(w, {"?" + w}) for w in words])
            if name:
                named[name] = deps[f]
    return deps


def static_errors(figures, deps, sources):
    """Names nothing defines, blocks the page lacks or that cannot be a source (sources: block
    name -> None, or why it cannot be one)."""
    errors = []
    for f in figures:
        for d in sorted(deps[f]):
            why = ("no value is named so" if d.startswith("?") else
                   "the page has no block of that name" if d not in sources else sources[d])
            if why:
                errors.append(f"{f.where}: <!-- {f.spec} -->: {d.lstrip('?')}: {why}")
    return errors


def check(lines, figures, outputs, sources):
    """Checks the figures whose blocks ran (outputs: name -> lines). Returns (errors, drifts):
    a drift is (line index, start, end, new text, message), what --update rewrites."""
    deps = dependencies(figures)
    errors, edits, values = static_errors(figures, deps, sources), [], {}
    ready = [f for f in figures if deps[f] <= set(outputs)]
    for f in sorted(ready, key=lambda f: f.kind == "expression"):  # values before expressions
        line = lines[f.index]
        try:
            if f.kind == "quote":
                new = quoted(f, line, outputs)
            elif f.kind == "expression":
                name, expression, form = EXPRESSION.match(f.spec).groups()
                value = eval(expression, {"__builtins__": {}}, {**HELPERS, **values})
                new = form.format(value)
                if name:
                    values[name] = Value(new)
            else:
                new = capture(f, outputs)
                name = REGEX_SOURCE.match(f.spec).group(1)
                if name:
                    values[name] = Value(new)
        except (ValueError, NameError, SyntaxError, TypeError, ZeroDivisionError) as e:
            errors.append(f"{f.where}: {e}")
            continue
        if f.kind == "let":
            continue
        before = line[: f.start]
        if f.kind == "quote":
            old = CODE_SPAN_END.search(before).group(1)
            start = f.start - len(old) - 1
        else:
            m = re.search(r"(?<![\w.,])" + shaped_like(new) + "$", before)
            if not m:
                errors.append(f"{f.where}: no figure shaped like '{new}' before <!-- {f.spec} -->")
                continue
            old, start = m.group(), m.start()
        if old != new:
            source = "the expression" if f.kind == "expression" else source_of(f)
            edits.append((f.index, start, start + len(old), new,
                          f"{f.where}: prose figure '{old}' but {source} gives '{new}'"))
    return errors, edits


def quoted(figure, line, outputs):
    """The output's text that a code span quotes (found by its shape)."""
    quote = CODE_SPAN_END.search(line[: figure.start]).group(1)
    found = re.search(shaped_like(quote), "\n".join(outputs[figure.spec]))
    if not found:
        raise ValueError(f"`{quote}` is not in {figure.spec}'s output, even with other figures")
    return found.group()


def apply(lines, edits):
    """Rewrites the prose figures in place (right to left on each line)."""
    for index, start, end, new, _ in sorted(edits, key=lambda e: (e[0], -e[1])):
        lines[index] = lines[index][:start] + new + lines[index][end:]
