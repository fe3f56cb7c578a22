#!/usr/bin/env python3
"""The house's rules, checked on the sources (no build needed):

- layers only look down: every `#include "..."` of the project goes to a file of the same or a
  lower layer, as the layer table in docs/architecture.md orders them; each include that looks up
  is listed there with its reason (at most MAX_EXCEPTIONS), and each listed one still exists;
- no file outside tests over MAX_LINES lines, and at most MAX_OVER_SOFT over SOFT_LINES;
- no function over MAX_FUNCTION_LINES lines (from its signature's line to its closing brace);
- at most MAX_ENGINES training engines (classes implementing train::Layout);
- at most MAX_SCHEDULE_LITERALS schedule names written as string literals in code outside the
  schedule registry (core/theory/schedule_kind.cpp): code names a schedule by its ScheduleKind;
- no lesson (lessons/, web/) calls the training loop or casts a layout: a lesson builds a
  run::RunSpec and reads the RunResult's named figures (core/run/run.h).

Run: tests/structure/check_structure.py [--root DIR]. Prints the figures, exits 1 on a breach.
"""
import argparse
import os
import re
import sys

MAX_EXCEPTIONS = 1
MAX_LINES, SOFT_LINES, MAX_OVER_SOFT = 400, 300, 12
MAX_FUNCTION_LINES = 80
MAX_ENGINES = 3
ENGINE = re.compile(r"\bclass\s+(\w+)\s*(?:final\s*)?:\s*public\s+(?:train::)?Layout\b")
MAX_SCHEDULE_LITERALS = 5
SCHEDULE_REGISTRY = "core/theory/schedule_kind.cpp"
SCHEDULE_LITERAL = re.compile(r'"(gpipe|1f1b|interleaved|zb-h1|zbv|dualpipev|dualpipe)"')
LESSON_DIRS = ("lessons/", "web/")
LESSON_REACHES_IN = re.compile(
    r"\btrain::train\s*\(|\b(?:static|dynamic)_cast<\s*(?:const\s+)?parallel::\w+")
SOURCE_DIRS = ["core", "lessons", "viz", "exercises", "solutions", "web"]
SUFFIXES = (".h", ".cpp", ".cu", ".inc")


def sources(root):
    for top in SOURCE_DIRS:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    yield os.path.relpath(os.path.join(folder, name), root)


def layer_table(doc):
    """The rows of the table under '## Layers': (number, [path prefixes]); and the exceptions
    table under '### Includes that look up': {(from, to)}."""
    text = open(doc).read()
    layers, exceptions, section = [], set(), None
    for line in text.splitlines():
        if line.startswith("## "):
            section = "layers" if line.strip() == "## Layers" else None
        elif line.startswith("### "):
            section = "exceptions" if line.strip() == "### Includes that look up" else None
        elif section and line.startswith("|") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            paths = re.findall(r"`([^`]+)`", cells[1] if section == "layers" else cells[0])
            if section == "layers" and cells[0].isdigit():
                layers.append((int(cells[0]), [p.rstrip("/") for p in paths]))
            elif section == "exceptions" and len(paths) == 2:
                exceptions.add((paths[0], paths[1]))
    return layers, exceptions


def layer_of(path, layers):
    best, best_len = None, -1
    for number, prefixes in layers:
        for p in prefixes:
            if (path == p or path.startswith(p + "/") or path.startswith(p + ".")) and len(p) > best_len:
                best, best_len = number, len(p)
    return best


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def strip_comments_and_strings(text):
    text = strip_comments(text)
    text = re.sub(r'R"\((.*?)\)"', lambda m: '""' + "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)


FUNCTION_HEAD = re.compile(
    r"\)\s*(const|override|noexcept|final|mutable|->\s*[\w:<>,\s*&]+|\s)*$")
CONTROL_HEAD = re.compile(r"\b(if|for|while|switch|catch)\s*\([^;{}]*\)\s*$")


def long_functions(path, text):
    """(lines, first line) of each outermost function body longer than the limit."""
    found, stack, line = [], [], 1
    text = strip_comments_and_strings(text)
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            head = text[max(0, i - 300):i].rstrip()
            is_function = bool(FUNCTION_HEAD.search(head)) and not CONTROL_HEAD.search(head[-200:])
            stack.append((is_function, line))
        elif c == "}" and stack:
            is_function, first = stack.pop()
            if is_function and not any(f for f, _ in stack):
                if line - first + 1 > MAX_FUNCTION_LINES:
                    found.append((line - first + 1, first))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    layers, allowed = layer_table(os.path.join(root, "docs", "architecture.md"))
    failures = []
    if not layers:
        failures.append("docs/architecture.md has no '## Layers' table")
    upward, seen, over_soft, engines, literals, reach_in = set(), set(), [], [], [], []
    for path in sources(root):
        text = open(os.path.join(root, path), errors="replace").read()
        own = layer_of(path, layers)
        if own is None:
            failures.append(f"{path}: in no layer of docs/architecture.md's table")
        for target in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, flags=re.M):
            theirs = layer_of(target, layers)
            if own is not None and theirs is not None and theirs > own:
                upward.add((path, target))
        lines = text.count("\n")
        if lines > MAX_LINES:
            failures.append(f"{path}: {lines} lines, more than {MAX_LINES}")
        elif lines > SOFT_LINES:
            over_soft.append(path)
        code = strip_comments(text)
        engines += [f"{path}: {m.group(1)}" for m in ENGINE.finditer(code)]
        if path.startswith(LESSON_DIRS):
            reach_in += [f"{path}: {m.group(0)}" for m in LESSON_REACHES_IN.finditer(code)]
        if path != SCHEDULE_REGISTRY:
            literals += [f"{path}: {m.group(0)}" for m in SCHEDULE_LITERAL.finditer(code)]
        for length, first in long_functions(path, text):
            failures.append(f"{path}:{first}: a function of {length} lines, more than "
                            f"{MAX_FUNCTION_LINES}")
    for path, target in sorted(upward - allowed):
        failures.append(f"{path} includes {target}, a higher layer (docs/architecture.md, Layers)")
    for path, target in sorted(allowed - upward):
        failures.append(f"docs/architecture.md lists {path} -> {target}, which no longer looks "
                        "up: remove the row")
    if len(allowed) > MAX_EXCEPTIONS:
        failures.append(f"{len(allowed)} includes look up, more than {MAX_EXCEPTIONS}")
    if len(over_soft) > MAX_OVER_SOFT:
        failures.append(f"{len(over_soft)} files over {SOFT_LINES} lines, more than "
                        f"{MAX_OVER_SOFT}: " + ", ".join(over_soft))
    if len(engines) > MAX_ENGINES:
        failures.append(f"{len(engines)} training engines, more than {MAX_ENGINES}: "
                        + ", ".join(engines))
    if len(literals) > MAX_SCHEDULE_LITERALS:
        failures.append(f"{len(literals)} schedule names as string literals outside "
                        f"{SCHEDULE_REGISTRY}, more than {MAX_SCHEDULE_LITERALS}: "
                        + ", ".join(literals))
    for r in reach_in:
        failures.append(f"{r}: a lesson runs a spec (run::run) and reads its RunResult instead")
    print(f"lessons calling train::train or casting a layout: {len(reach_in)} (at most 0)")
    print(f"engines (classes implementing train::Layout): {len(engines)} (at most {MAX_ENGINES}): "
          + ", ".join(e.split(": ")[1] for e in engines))
    print(f"schedule names as string literals outside the registry: {len(literals)} "
          f"(at most {MAX_SCHEDULE_LITERALS})")
    print(f"layers: {len(layers)}; includes that look up: {len(upward)} "
          f"(at most {MAX_EXCEPTIONS}, each listed)")
    print(f"files over {SOFT_LINES} lines: {len(over_soft)} (at most {MAX_OVER_SOFT}); "
          f"over {MAX_LINES}: at most 0")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
