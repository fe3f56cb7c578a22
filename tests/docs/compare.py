"""How a shown output is compared with a run's (run_docs.py's docstring gives the rules): masking
the figures of this machine, the marks of float rounding, excerpts (`...`) found in the output
and regenerated in their shape."""
import re

# A figure as the programs print it: 1,234 / 0.5 / 9.43e-06.
FIGURE = r"\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
NUMBER = re.compile(FIGURE)
WALL_LINE = re.compile(r"\bwall\b|this machine|this host")
# The planner's own run time at the end of a line: "... (1.38 s)", "..., in 22.5 s" (the
# modeled figures on the same line stay exact).
WALL_SECONDS = re.compile(r"(\(|\bin )[0-9]+(\.[0-9]+)? s(\)?)$")
# A time with its unit, on a masked line: "577.348 us", "1.2 ms", "3 s" (not "GB/s").
WALL_TIME = re.compile(FIGURE + r" ?(?:ns|us|µs|ms|s)\b")
# Figures of float rounding, marked on the page (see the module docstring): `< BOUND` and
# `~VALUE`. A marked figure matches a run's figure (NUMBER, maybe signed) at the same place.
SIGNED_NUMBER = f"(-?{FIGURE})"
ROUNDING_MARK = re.compile(r"(<|~) ?" + SIGNED_NUMBER)
# How far a `~VALUE` figure may move, relative to VALUE: 1%. Rounding differences between BLAS
# kernel sets move fp16/bf16 losses after tens of steps in the third or fourth significant digit
# (./dev.sh test-portable measures it); a wrong result (a bug, a changed option) moves them by far
# more. One tolerance for every page: never widened for one figure.
ROUNDING_RELATIVE = 0.01
ELLIPSIS = "..."


def masked(line, wall_run):
    line = WALL_SECONDS.sub(r"\1# s\3", line.rstrip())
    if wall_run or WALL_LINE.search(line):
        # A time's unit follows its size (577 us on one run, 1.2 ms on a loaded one): a time
        # becomes `# s` whatever its unit. Column widths follow the figures, so runs of spaces
        # count as one on a masked line.
        line = WALL_TIME.sub("# s", line)
        return re.sub(r" +", " ", NUMBER.sub("#", line))
    return line


def figure_value(text):
    return float(text.replace(",", ""))


def within_rounding(mark, shown, real):
    """Whether the run's figure `real` satisfies the page's marked figure (`<` bound or `~`)."""
    shown_value, real_value = figure_value(shown), figure_value(real)
    if mark == "<":
        return abs(real_value) <= shown_value
    return abs(real_value - shown_value) <= ROUNDING_RELATIVE * abs(shown_value)


def rounding_match(shown, real):
    """Whether a page line with rounding marks matches a line of the run: the text between the
    marks exactly (runs of spaces as one), each marked figure by its rule. False for a line
    without marks."""
    marks = list(ROUNDING_MARK.finditer(shown.rstrip()))
    if not marks:
        return False

    def literal(text):  # the text between marks, with runs of spaces as one
        return " +".join(re.escape(piece) for piece in re.split(r" +", text))

    pattern, cursor = "", 0
    for m in marks:
        pattern += literal(shown[cursor : m.start()]) + SIGNED_NUMBER
        cursor = m.end()
    pattern += literal(shown.rstrip()[cursor:])
    found = re.fullmatch(pattern, real.rstrip())
    return bool(found) and all(within_rounding(m.group(1), m.group(2), found.group(k + 1))
                               for k, m in enumerate(marks))


def same_line(shown, real, wall_run):
    """A shown line agrees with a line of the run: exactly after masking, or by its rounding
    marks."""
    return masked(shown, wall_run) == masked(real, wall_run) or rounding_match(shown, real)


def skeleton(line):
    return NUMBER.sub("#", line.rstrip())


def loose(line):
    """The skeleton with runs of spaces as one: column widths follow the figures."""
    return re.sub(" +", " ", skeleton(line))


def segments(expected):
    """Splits shown output at `...` lines: (anchored_start, [segment, ...], anchored_end)."""
    parts, current = [], []
    for line in expected:
        if line.strip() == ELLIPSIS:
            parts.append(current)
            current = []
        else:
            current.append(line)
    parts.append(current)
    start_free, end_free = parts[0] == [], parts[-1] == []
    return (not start_free, [p for p in parts if p], not end_free, len(parts) > 1)


def find_segments(expected, actual, same):
    """Positions in `actual` where each segment starts (same order), or None if one is missing.
    same(shown_line, actual_line) says whether two lines agree."""
    anchored_start, parts, anchored_end, elided = segments(expected)
    if not elided:  # the whole output is shown (an empty block: no output)
        shown = parts[0] if parts else []
        real = [] if actual == [""] else actual
        agree = len(shown) == len(real) and all(same(a, b) for a, b in zip(shown, real))
        return [0] if agree else None
    positions, cursor = [], 0
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        candidates = range(cursor, len(actual) - len(part) + 1)
        if n == 0 and anchored_start:
            candidates = [0]
        if last and anchored_end:
            candidates = [len(actual) - len(part)]
        hit = next((p for p in candidates if p >= cursor and all(
            same(part[k], actual[p + k]) for k in range(len(part)))), None)
        if hit is None:
            return None
        positions.append(hit)
        cursor = hit + len(part)
    return positions


def regenerated(expected, actual):
    """The shown output rewritten from `actual`, keeping the excerpt's shape and the page's
    rounding marks where the run still satisfies them; None if the shape (numbers masked) no
    longer appears in the output."""
    new = shaped(expected, actual)
    if new is None:
        return None
    marked = [line for line in expected if ROUNDING_MARK.search(line)]
    return [next((m for m in marked if rounding_match(m, line)), line) for line in new]


def shaped(expected, actual):
    anchored_start, parts, anchored_end, elided = segments(expected)
    if not elided:
        return list(actual)
    positions = find_segments(expected, actual, lambda a, b: skeleton(a) == skeleton(b) or
                              rounding_match(a, b))
    if positions is None:
        return reexcerpted(expected, actual)
    result = []
    if not anchored_start:
        result.append(ELLIPSIS)
    for n, (part, pos) in enumerate(zip(parts, positions)):
        if n > 0:
            result.append(ELLIPSIS)
        result.extend(actual[pos : pos + len(part)])
    if not anchored_end:
        result.append(ELLIPSIS)
    return result


def reexcerpted(expected, actual):
    """When lines were added or removed inside an excerpt: each shown line is found again by its
    start (its first 8 characters as they are, its first 40 -- or else 14 -- with numbers
    masked), in order, and `...` marks the gaps. None if a shown line is not found."""
    shown = [l for l in expected if l.strip() != ELLIPSIS]
    picked, cursor = [], 0
    for line in shown:
        hit = None
        for width in (40, 14):  # 14: a timeline row ("GPU 0 compute|") whose drawing changed
            head, key = line[:8], loose(line.rstrip(". "))[:width]
            hit = next((k for k in range(cursor, len(actual))
                        if actual[k][:8] == head and loose(actual[k]).startswith(key)), None)
            if hit is not None:
                break
        if hit is None:
            return None
        picked.append(hit)
        cursor = hit + 1
    result = [ELLIPSIS] if picked and picked[0] > 0 else []
    for n, k in enumerate(picked):
        if n > 0 and k != picked[n - 1] + 1:
            result.append(ELLIPSIS)
        result.append(actual[k])
    if picked and picked[-1] < len(actual) - 1:
        result.append(ELLIPSIS)
    return result
