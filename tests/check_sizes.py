#!/usr/bin/python3
"""The size rule (issue #14): files by concern, functions short enough to read on one screen.

Fails (exit 1) when a source file under harness/, runtime/, reference/, optimized/ or adapters/
is over MAX_FILE_LINES lines, or a C function there is over MAX_FUNC_LINES lines (from the
first line of its header to its closing brace) without a reason: a comment containing "long:"
in the comment block directly above the function header, e.g.

    /* long: one switch over every CLI flag; splitting it would scatter the flag table */
    int parse_args(...)

Files named in tests/size_exceptions.txt (one path a line, '#' comments) are reported but do
not fail the rule: they are files other work owns and has not split yet. tests/ is exempt
(listed, never failing), and so are test drivers under a tests/ directory
inside the checked ones (adapters/*/tests/). Usage: check_sizes.py [SOURCE_DIR] [--list]. Exit 0 pass, 1 fail,
2 bad usage.
"""
import os
import re
import sys

MAX_FILE_LINES = 800
MAX_FUNC_LINES = 120
CHECKED_DIRS = ("harness", "runtime", "reference", "optimized", "adapters")
EXEMPT_DIRS = ("tests",)
SOURCE_EXT = (".c", ".h", ".py", ".sh", ".cpp")
C_EXT = (".c", ".h")
REASON = re.compile(r"\blong:")


# ---- reading C ----

def strip_code(text):
    """The text with comments, string and character literals blanked (newlines kept), so that
    braces inside them do not count; returns (code, comment_lines): the set of line numbers
    (1-based) that hold a comment and the comment text by line."""
    out = []
    comments = {}
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            chunk = text[i:j]
            for k, part in enumerate(chunk.split("\n")):
                comments.setdefault(line + k, []).append(part)
            out.append("".join(ch if ch == "\n" else " " for ch in chunk))
            line += chunk.count("\n")
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            comments.setdefault(line, []).append(text[i:j])
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else text[i:j])
            i = j
        else:
            if c == "\n":
                line += 1
            out.append(c)
            i += 1
    return "".join(out), comments


def c_functions(text):
    """[(name, header_line, end_line)] of the function definitions in a C file (1-based)."""
    code, comments = strip_code(text)
    lines = code.split("\n")
    funcs = []
    depth = 0
    header_start = None  # first line of the current top-level declaration
    pending = ""         # top-level text since the last ';', '}' or preprocessor line
    start_line = None
    name = None
    in_pp = False
    for ln, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if depth == 0 and (stripped.startswith("#") or in_pp):
            in_pp = raw.rstrip().endswith("\\")
            continue
        for ch in raw:
            if depth == 0:
                if ch == "{":
                    m = re.search(r"([A-Za-z_]\w*)\s*\((?:[^()]|\([^()]*\))*\)\s*$", pending)
                    head = pending.strip()
                    is_func = (m is not None and "=" not in head.split("(")[0]
                               and not re.match(r"(typedef\b|struct\b|union\b|enum\b)", head)
                               and m.group(1) not in ("if", "for", "while", "switch"))
                    if is_func:
                        name, start_line = m.group(1), header_start or ln
                    else:
                        name, start_line = None, None
                    depth = 1
                elif ch == ";":
                    pending, header_start = "", None
                elif not ch.isspace():
                    if header_start is None:
                        header_start = ln
                    pending += ch
                else:
                    pending += ch
            else:
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        if name is not None:
                            funcs.append((name, start_line, ln))
                        name, start_line, pending, header_start = None, None, "", None
        if depth == 0 and pending:
            pending += " "
    return funcs, comments


def has_reason(comments, header_line):
    """A "long:" reason in the comment block that ends on the line directly above the header."""
    ln = header_line - 1
    while ln >= 1 and ln in comments:
        if any(REASON.search(part) for part in comments[ln]):
            return True
        ln -= 1
    return False


# ---- the rule ----

def source_files(root, dirs):
    for d in dirs:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames[:] = sorted(x for x in dirnames if x not in ("__pycache__", "build"))
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def file_problems(root, rel):
    path = os.path.join(root, rel)
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    problems = []
    nlines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if nlines > MAX_FILE_LINES:
        problems.append("%s: %d lines (limit %d)" % (rel, nlines, MAX_FILE_LINES))
    if rel.endswith(C_EXT):
        funcs, comments = c_functions(text)
        for name, start, end in funcs:
            length = end - start + 1
            if length > MAX_FUNC_LINES and not has_reason(comments, start):
                problems.append("%s:%d: function %s is %d lines (limit %d, or a comment with "
                                "'long: REASON' directly above it)"
                                % (rel, start, name, length, MAX_FUNC_LINES))
    return problems


def read_exceptions(root):
    path = os.path.join(root, "tests", "size_exceptions.txt")
    out = set()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.split("#", 1)[0].strip()
                if line:
                    out.add(line)
    return out


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    flags = [a for a in argv[1:] if a.startswith("--")]
    if len(args) > 1 or any(f not in ("--list",) for f in flags):
        print("usage: check_sizes.py [SOURCE_DIR] [--list]", file=sys.stderr)
        return 2
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, "harness")):
        print("check_sizes.py: %s: no harness/ directory (not the source tree)" % root,
              file=sys.stderr)
        return 2
    exceptions = read_exceptions(root)
    failing, known, exempt = [], [], []
    for rel in source_files(root, CHECKED_DIRS):
        probs = file_problems(root, rel)
        if "/tests/" in rel:  # an adapter's own test drivers (adapters/*/tests/): like tests/
            exempt.extend(probs)
        else:
            (known if rel in exceptions else failing).extend(probs)
    for rel in source_files(root, EXEMPT_DIRS):
        exempt.extend(file_problems(root, rel))
    stale = sorted(e for e in exceptions
                   if not os.path.exists(os.path.join(root, e)) or not file_problems(root, e))
    if "--list" in flags or failing:
        for p in exempt:
            print("exempt (tests/): " + p)
        for p in known:
            print("known exception (tests/size_exceptions.txt): " + p)
    for e in stale:
        print("note: %s in tests/size_exceptions.txt now passes the rule (remove it)" % e)
    for p in failing:
        print("FAIL: " + p)
    print("size rule: %d over the limits, %d known exceptions, %d in exempt tests/"
          % (len(failing), len(known), len(exempt)))
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
