"""Read a bash launch script the way bash would expand it, without running anything.

Megatron-LM's own ``examples/`` scripts build the command line from variables and bash arrays
(``MODEL_ARGS=( --num-layers 32 ... )``, ``TRAINING_ARGS+=("${DDP_ARGS[@]}")``), defaults
(``${MASTER_PORT:-29500}``), arithmetic (``WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))``), quoted
multi-line strings (``MODEL_ARGS=" \\ --num-layers 36 \\ ..."``) and line continuations, with
``if [[ "$DTYPE" == "fp8" ]]`` blocks that add arguments. This module reads such a file statically:

- statements are split as bash splits them (quotes and array parentheses span lines, ``\\``-newline
  joins lines, ``#`` starts a comment at a word start, ``;`` separates);
- words are expanded as bash expands them: ``$NAME``, ``${NAME}``, ``${NAME:-default}`` (also ``-``,
  ``:=``, ``=``), positional ``$1``/``${1:-default}``, ``${ARR[@]}``/``${ARR[*]}``, ``$((arith))``
  (integers, ``+ - * / %``, parentheses; evaluated by a bounded parser), with word splitting of
  unquoted expansions and quoted ``"${ARR[@]}"`` keeping one word per element;
- ``if``/``elif``/``else`` tests made of ``[ ]``/``[[ ]]`` string and integer comparisons, ``-z``/``-n``,
  ``!``, ``&&`` and ``||`` are evaluated; a test it cannot decide (a file test) takes the first branch,
  with a note naming its line;
- loops, ``case`` blocks and function bodies are not entered (noted); a variable one of them assigns is
  unknown from where it runs (a loop whose test or list lets it run, a case block, a function where it is
  called; `Script.unsettled`), so an option read from it is refused as one read from ``$(...)`` is;
  ``$#`` is 0 (the script is read with no positional parameters);
- ``source FILE`` / ``. FILE`` reads that file's statements in place (`primus.launch.shell_source`);
- nothing is executed: a command substitution ``$(...)`` or a backtick is reported as unresolved with
  its line, and stands in the expanded words as one opaque word (`Script.substitution_in` finds it,
  `Script.restore` writes it back as the file spells it), so ``TP=$(echo 4)`` is never word-split into
  ``$(echo`` and ``4)`` and a reader can say which value came from it; variables the file never sets
  stay as written (``$DATA_PATH``), except
  in a test, where an unset variable is empty, as in a fresh shell.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path

from primus.errors import InputError
from primus.launch.shell_conditions import condition
from primus.launch.shell_limits import Value, bounded, check_statement, size
from primus.launch.shell_source import MAX_SOURCES, sourced_path, split_here

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
#: Blocks that are never entered, and the word that closes each.
_OPEN_BLOCK = {"while": "done", "for": "done", "until": "done", "case": "esac", "select": "done"}
#: A bound on arithmetic results, so a hostile `$((...))` cannot build a huge integer (bash is 64-bit).
_MAX_ARITH = 2**63
#: A command substitution in expanded text: ``\ue000K\ue001`` (private-use characters, never
#: whitespace, so word splitting keeps it whole), K indexing `Script.substitutions`.
_SUB = re.compile("\ue000(\\d+)\ue001")


@dataclass(frozen=True)
class Command:
    """A simple command after expansion: its first line in the file and its words."""

    line: int
    words: tuple[str, ...]
    prefix: tuple[str, ...] = ()  # NAME=value words before the command (its environment)


@dataclass
class Script:
    """What a script defines and runs: variables (strings or arrays) in definition order, the
    exported ones, the commands, notes on how the file was read, and unresolved substitutions."""

    variables: dict[str, Value] = field(default_factory=dict)
    defined_at: dict[str, int] = field(default_factory=dict)
    exported: list[tuple[str, str]] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    substitutions: list[tuple[int, str]] = field(default_factory=list)  # (line, text) of each $(...)
    #: substitution index -> why it stands for a variable's value (`unsettled`): set in a block not entered
    settled_by: dict[int, str] = field(default_factory=dict)
    #: functions the file defines: name -> (line, the variables its body assigns, the commands it runs)
    functions: dict[str, tuple[int, set[str], set[str]]] = field(default_factory=dict)

    def assigned_by_call(self, name: str) -> set[str]:
        """What a call of function `name` may assign: its body's assignments and those of the functions it
        calls, however deep."""
        seen, todo, names = {name}, [name], set()
        while todo:
            _, assigned, calls = self.functions[todo.pop()]
            names |= assigned
            for callee in calls & set(self.functions):
                if callee not in seen:
                    seen.add(callee)
                    todo.append(callee)
        return names

    def unsettled(self, names: set[str], line: int, why: str) -> None:
        """The variables `names`, assigned in a block primus does not enter that runs here (a loop, a case
        block, a called function): from here on each is only known by running the block, so it stands as
        an opaque word, as a command substitution does, and an option read from it is refused."""
        for name in sorted(names):
            self.variables[name] = self.substitute(line, f"${name}")
            self.settled_by[len(self.substitutions) - 1] = why
            self.defined_at.setdefault(name, line)

    def why_unresolved(self, text: str) -> str | None:
        """What sets the value a substitution in `text` stands for, when it is a variable (`unsettled`)."""
        match = _SUB.search(text)
        return None if match is None else self.settled_by.get(int(match.group(1)))

    def substitute(self, line: int, raw: str) -> str:
        """The opaque word that stands for a command substitution not run."""
        self.substitutions.append((line, raw))
        return f"\ue000{len(self.substitutions) - 1}\ue001"

    def substitution_in(self, text: str) -> tuple[int, str] | None:
        """(line, text as written) of the first command substitution in an expanded word."""
        match = _SUB.search(text)
        return None if match is None else self.substitutions[int(match.group(1))]

    def restore(self, text: str) -> str:
        """Expanded text with every command substitution written back as the file spells it."""
        return _SUB.sub(lambda m: self.substitutions[int(m.group(1))][1], text)

    def restored(self, name: str) -> Value | None:
        """A variable's value as the file spells its substitutions (None: not set)."""
        value = self.variables.get(name)
        if isinstance(value, list):
            return [self.restore(v) for v in value]
        return None if value is None else self.restore(value)


# ---- statements -----------------------------------------------------------------------------------


def statements(text: str, where: str) -> list[tuple[int, str]]:
    """Split the file into statements (line of their start, text), as bash does: quotes and ``( )``
    span lines, ``\\``-newline joins, comments are cut, ``;`` and newlines end a statement."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    quote, depth, line, start = "", 0, 1, 1
    i, n = 0, len(text)

    def flush() -> None:
        body = "".join(buf).strip()
        if body:
            out.append((start, body))
        buf.clear()

    while i < n:
        c = text[i]
        if quote == "'":
            buf.append(c)
            quote = "" if c == "'" else quote
        elif c == "\\" and i + 1 < n:
            if text[i + 1] == "\n":  # continuation: removed, inside double quotes too
                line += 1
                i += 2
                continue
            buf.append(text[i:i + 2])
            i += 2
            continue
        elif quote == '"':
            buf.append(c)
            if c == '"':
                quote = ""
        elif c in "'\"":
            quote = c
            buf.append(c)
        elif c == "#" and (not buf or buf[-1][-1:].isspace() or buf[-1][-1:] in "(;"):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif c == "(":
            depth += 1
            buf.append(c)
        elif c == ")":
            depth = max(0, depth - 1)
            buf.append(c)
        elif c == ";" and depth == 0:
            if i + 1 < n and text[i + 1] == ";":  # ';;' ends a case item
                buf.append(";;")
                i += 2
                continue
            flush()
            start = line
        elif c == "\n" and depth == 0:
            heredoc = _HEREDOC.search("".join(buf))
            flush()
            if heredoc is not None:  # the document's lines are data, not statements: skip to its end
                end_word = heredoc.group(2)
                while i + 1 < n:
                    nl = text.find("\n", i + 1)
                    body = text[i + 1: n if nl < 0 else nl]
                    line += 1
                    i = n - 1 if nl < 0 else nl
                    if body.strip() == end_word:
                        break
            start = line + 1
        else:
            buf.append(c)
        if c == "\n":
            line += 1
            if not "".join(buf).strip():
                start = line
        i += 1
    if quote:
        raise InputError(where, f"line {start}", f"unterminated {quote} quote")
    flush()
    return out


# ---- expansion ------------------------------------------------------------------------------------


class Expander:
    """Expands words against the variables read so far; records substitutions it will not run."""

    def __init__(self, script: Script, where: str, source: str = "") -> None:
        self.script, self.where = script, where
        self.line = 0
        self.expanded = 0  # characters the current statement's variable references expanded to
        self.in_test = False
        self.lines = source.splitlines()  # the file as written: a continued statement spans several

    def unresolved(self, text: str) -> None:
        self.script.unresolved.append(f"line {self.at(text)}: {text} is not run (read, never executed)")

    def at(self, text: str) -> int:
        """The physical line of `text` in the statement that starts on `self.line`: the first line from
        there that holds it (a `\\`-continued command reports each substitution on its own line), else
        the statement's first line."""
        for k in range(max(self.line, 1), len(self.lines) + 1):
            if text in self.lines[k - 1]:
                return k
        return self.line

    def words(self, text: str) -> list[str]:
        """Split and expand a statement's text into words."""
        words: list[str] = []
        cur: list[str] = []
        have = False
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c.isspace():
                if have:
                    words.append("".join(cur))
                cur, have = [], False
                i += 1
            elif c == "'":
                end = text.find("'", i + 1)
                end = n if end < 0 else end
                cur.append(text[i + 1:end])
                have, i = True, end + 1
            elif c == '"':
                i, pieces = self._double(text, i + 1)
                if len(pieces) == 1:
                    cur.append(pieces[0])
                    have = True
                else:  # "${ARR[@]}": one word per element
                    cur.append(pieces[0])
                    words.append("".join(cur))
                    words.extend(pieces[1:-1])
                    cur, have = [pieces[-1]], True
            elif c == "\\" and i + 1 < n:
                cur.append(text[i + 1])
                have, i = True, i + 2
            elif c == "$" or c == "`":
                i, value = self._dollar(text, i)
                flat = " ".join(value) if isinstance(value, list) else value
                if flat[:1].isspace() and have:
                    words.append("".join(cur))
                    cur, have = [], False
                for k, part in enumerate(flat.split()):
                    if k:
                        words.append("".join(cur))
                        cur = []
                    cur.append(part)
                    have = True
                if flat[-1:].isspace() and have:
                    words.append("".join(cur))
                    cur, have = [], False
            else:
                cur.append(c)
                have, i = True, i + 1
        if have:
            words.append("".join(cur))
        return words

    def _double(self, text: str, i: int) -> tuple[int, list[str]]:
        """The inside of a double-quoted string from i; returns the index after the closing quote and
        the pieces (more than one only for ``"${ARR[@]}"``)."""
        pieces = [""]
        n = len(text)
        while i < n and text[i] != '"':
            c = text[i]
            if c == "\\" and i + 1 < n and text[i + 1] in '$`"\\':
                pieces[-1] += text[i + 1]
                i += 2
            elif c in "$`":
                i, value = self._dollar(text, i)
                if isinstance(value, list):
                    if not value:
                        continue
                    pieces[-1] += value[0]
                    pieces.extend(value[1:])
                else:
                    pieces[-1] += value
            else:
                pieces[-1] += c
                i += 1
        return i + 1, pieces

    def _dollar(self, text: str, i: int) -> tuple[int, Value]:
        """Expand the ``$...`` (or backtick) at i; returns the index after it and the value (a list
        for an array expanded with [@] or [*])."""
        n = len(text)
        if text[i] == "`":
            end = text.find("`", i + 1)
            end = n - 1 if end < 0 else end
            raw = text[i:end + 1]
            self.unresolved(raw)
            return end + 1, self.script.substitute(self.at(raw), raw)
        if text.startswith("$((", i):
            end = _matching(text, i + 1)
            inner = text[i + 3:end - 1]
            raw = text[i:end + 1]
            return end + 1, self._arith(inner, raw)
        if text.startswith("$(", i):
            end = _matching(text, i + 1)
            raw = text[i:end + 1]
            self.unresolved(raw)
            return end + 1, self.script.substitute(self.at(raw), raw)
        if text.startswith("${", i):
            end = text.find("}", i)
            if end < 0:
                raise InputError(self.where, f"line {self.line}", "unterminated ${")
            return end + 1, self._braced(text[i + 2:end], text[i:end + 1])
        match = _NAME.match(text, i + 1) or re.compile(r"[0-9#?@*$!-]").match(text, i + 1)
        if not match:
            return i + 1, "$"
        name = match.group()
        return match.end(), self._lookup(name, "$" + name)

    def _lookup(self, name: str, raw: str) -> Value:
        if name == "#":  # the script is read with no positional parameters ($1 is unset), so $# is 0
            return "0"
        value = self.script.variables.get(name)
        if value is None:
            return "" if self.in_test else raw
        return self._charged(name, value)

    def _charged(self, name: str, value: Value) -> Value:
        """`value`, counted against the statement's expansion budget (`shell_limits`): a line of many
        references to a large variable would otherwise build gigabytes before any assignment is checked."""
        self.expanded += size(value)
        check_statement(self.expanded, name, self.where, self.line)
        return value

    def _braced(self, body: str, raw: str) -> Value:
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(\[([@*]|\d+)\])?(?:(:?[-=+])(.*))?", body, re.S)
        if not match:  # ${#ARR[@]}, ${X/a/b}, ...: not expanded
            self.unresolved(raw)
            return raw
        name, index, op, word = match.group(1), match.group(3), match.group(4), match.group(5)
        value = self.script.variables.get(name)
        if index is not None:
            if value is None:
                value = None
            elif index in "@*":
                value = value if isinstance(value, list) else [value]
            else:
                items = value if isinstance(value, list) else [value]
                value = items[int(index)] if int(index) < len(items) else ""
        elif isinstance(value, list):
            value = value[0] if value else ""
        empty = value is None or (op is not None and op.startswith(":") and value in ("", []))
        if op is None:
            if value is None:
                return "" if self.in_test else raw
            return self._charged(name, value)
        if op.endswith("+"):
            return "" if empty else " ".join(self.words(word or ""))
        if empty:
            default = self._inner(word or "")
            if op.endswith("="):
                self.script.variables[name] = default
            return default
        assert value is not None
        return self._charged(name, value)

    def _inner(self, word: str) -> str:
        """A default word (``${X:-"a b"}``): quotes removed, expansions done, no splitting."""
        return " ".join(self.words(word)) if word.strip() else ""

    def _arith(self, inner: str, raw: str) -> str:
        expanded = " ".join(self.words(inner.replace("(", " ( ").replace(")", " ) ")))
        expanded = _NAME.sub(lambda m: _num(self.script.variables.get(m.group())), expanded)
        try:
            value = _eval_arith(ast.parse(expanded, mode="eval").body)
        except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
            self.unresolved(raw)
            return raw
        return str(value)


def _num(value: Value | None) -> str:
    if isinstance(value, list):
        value = value[0] if value else ""
    value = (value or "0").strip()
    return value if re.fullmatch(r"-?\d+", value) else "None"


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: operator.mod}


def _eval_arith(node: ast.AST, depth: int = 0) -> int:
    """Bash integer arithmetic on a parsed expression: integer constants, + - * / %, unary minus."""
    if depth > 50:
        raise ValueError("too deep")
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval_arith(node.operand, depth + 1)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _eval_arith(node.left, depth + 1), _eval_arith(node.right, depth + 1)
        if isinstance(node.op, (ast.Div, ast.FloorDiv)):
            quotient = abs(left) // abs(right)  # bash truncates toward zero
            result = quotient if (left >= 0) == (right >= 0) else -quotient
        elif type(node.op) in _OPS:
            result = _OPS[type(node.op)](left, right)
        else:
            raise ValueError("operator")
        if abs(result) > _MAX_ARITH:
            raise ValueError("too large")
        return int(result)
    raise ValueError("not integer arithmetic")


def _matching(text: str, i: int) -> int:
    """Index of the ')' closing the '(' at i."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


# ---- the reader -----------------------------------------------------------------------------------


@dataclass
class _Frame:
    active: bool  # this branch runs
    taken: bool  # some branch of this if already ran (or is running)
    parent: bool  # the enclosing code runs


@dataclass
class _Block:
    """A loop, case block or function body that is read but not entered, and the variables it assigns."""

    kind: str
    line: int
    runs: bool | None  # whether it runs where it stands (None: cannot tell; a function runs when called)
    name: str | None = None
    names: set[str] = field(default_factory=set)
    calls: set[str] = field(default_factory=set)  # the first words of its statements (functions it may call)

    def close(self, script: Script) -> None:
        if self.kind == "function":
            assert self.name is not None
            script.functions[self.name] = (self.line, set(self.names), set(self.calls))
        elif self.runs is not False and self.names:
            what = "case block" if self.kind == "case" else f"{self.kind} loop"
            script.unsettled(self.names, self.line, f"the {what} on line {self.line}")


#: `local NAME=...`, `declare NAME=...` and the like: words before the assignments of a statement.
_DECLARE = re.compile(r"^(?:export|readonly|declare|typeset)(?:\s+-[A-Za-z]+)*\s+")


def assigned_names(stmt: str, in_header: bool = False) -> set[str]:
    """The variables a statement inside a block not entered may assign, in each of its commands (split at
    ``;;``, ``;``, ``&&``, ``||``; a ``case WORD in`` head, a case pattern ``pat)`` and ``do``/``then``/``else``/``{``
    dropped): ``NAME=...``/``NAME+=...`` words at a command's start, ``export``/``declare`` ones, ``read NAME``,
    ``mapfile``/``readarray NAME``, ``printf -v NAME``, ``let NAME=...``, ``(( NAME += ... ))``, and a loop's own
    variable (`in_header`: ``for NAME in ...``). ``local`` ones stay in their function."""
    text = stmt.strip()
    if in_header:
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\s+in\b", text)
        return {match.group(1)} if match else set()
    names: set[str] = set()
    for part in re.split(r";;|;|&&|\|\|", text):
        names |= _command_assigns(part.strip())
    return names


def _command_assigns(text: str) -> set[str]:
    """`assigned_names` of one command."""
    text = re.sub(r"^case\s+\S+\s+in\b\s*", "", text)
    text = re.sub(r"^\(?[^=()\s]*\)\s*", "", text) if re.match(r"^\(?[^=()\s]*\)", text) else text  # a pattern
    text = re.sub(r"^(?:do|then|else|\{)\s+", "", text)
    words = text.split()
    if not words or words[0] == "local":
        return set()
    if words[0] in ("read", "mapfile", "readarray"):
        return {w for w in words[1:] if _NAME.fullmatch(w)}
    if words[0] == "printf" and len(words) > 2 and words[1] == "-v" and _NAME.fullmatch(words[2]):
        return {words[2]}
    if words[0] == "let" or text.startswith("(("):
        names = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", text))
        steps = re.findall(r"(?:\+\+|--)\s*([A-Za-z_][A-Za-z0-9_]*)|([A-Za-z_][A-Za-z0-9_]*)\s*(?:\+\+|--)", text)
        return names | {a or b for a, b in steps}
    text = _DECLARE.sub("", text)
    names = set()
    for word in _raw_words(text):
        match = _ASSIGN.match(word) or re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=\(", word)
        if not match:
            break
        names.add(match.group(1))
    return names


def _loop_runs(head: str, stmt: str, ex: Expander) -> bool | None:
    """Whether a `while`/`until` loop's body runs at least once (its test decided as an `if` test is;
    None when it cannot be told), a `for` loop's (its list is not empty); None for a case block."""
    rest = stmt.split(None, 1)[1] if " " in stmt else ""
    rest = re.split(r";\s*do\b|\bdo\b", rest, maxsplit=1)[0].strip()
    if head in ("while", "until"):
        ex.in_test = True
        tested = ex.words(rest)
        ex.in_test = False
        value = None if any(ex.script.why_unresolved(w) for w in tested) else condition(tested)
        return None if value is None else (value if head == "while" else not value)
    if head in ("for", "select"):
        match = re.match(r"^[A-Za-z_][A-Za-z0-9_]*\s+in\b(.*)$", rest, re.S)
        if match is None:  # `for X; do` runs over the positional parameters, of which there are none
            return False
        listed = re.sub(r'"?\$\{?[@*]\}?"?', " ", match.group(1))  # "$@", $*: none either
        return bool(ex.words(listed))
    return None


def read_script(text: str, where: str, base_dir: Path | None = None) -> Script:
    """Read a bash script statically (see the module docstring); `base_dir`: the script's folder, from
    which sourced files are read."""
    script = Script()
    sources = 0
    ex = Expander(script, where, text)
    frames: list[_Frame] = []
    skip_until: list[str] = []
    skipped_blocks: list[str] = []
    block: _Block | None = None  # the outermost block being skipped
    queue = list(statements(text, where))
    while queue:
        line, stmt = queue.pop(0)
        ex.line, ex.expanded = line, 0
        head = stmt.split(None, 1)[0]
        if head in ("then", "else", "do") and stmt != head:  # `then X=1` on one line: two statements
            queue[:0] = [(line, head), (line, stmt[len(head):].strip())]
            continue
        if skip_until:
            if block is not None:
                block.names |= assigned_names(stmt)
                block.calls.add(head)
            if head in _OPEN_BLOCK or (re.match(r"^(function\s+\w+|\w+\s*\(\s*\))", stmt) and "{" in stmt):
                closer = _OPEN_BLOCK.get(head, "}")
                if not stmt.rstrip().endswith(closer):  # `case $1 in a) X=1;; esac` on one line opens nothing
                    skip_until.append(closer)
            elif head == skip_until[-1] or (stmt.rstrip().endswith(skip_until[-1]) and skip_until[-1] == "}") \
                    or (skip_until[-1] == "esac" and re.search(r";;\s*esac$", stmt.rstrip())):
                skip_until.pop()  # `*) shift ;; esac`: statements split at `;`, not at `;;`
            if not skip_until and block is not None:
                block.close(script)
                block = None
            continue
        running = not frames or frames[-1].active
        if head in _OPEN_BLOCK:
            opened = _Block(head, line, runs=_loop_runs(head, stmt, ex) if running else False)
            opened.names |= assigned_names(stmt.split(None, 1)[1] if " " in stmt else "", in_header=True)
            if not stmt.rstrip().endswith(_OPEN_BLOCK[head]):
                skip_until.append(_OPEN_BLOCK[head])
                block = opened
            else:
                opened.names |= assigned_names(stmt)
                opened.close(script)
            skipped_blocks.append(f"{head} on line {line}")
            continue
        function = re.match(r"^(?:function\s+(\w+)|(\w+)\s*\(\s*\))", stmt)
        if function:
            opened = _Block("function", line, runs=False, name=function.group(1) or function.group(2))
            body = stmt.split("{", 1)[1].rstrip().removesuffix("}") if "{" in stmt else ""
            opened.names |= assigned_names(body)
            opened.calls |= {part.split()[0] for part in body.split(";") if part.split()}
            if not stmt.rstrip().endswith("}"):
                skip_until.append("}")
                block = opened if running else None
            elif running:
                opened.close(script)
            skipped_blocks.append(f"function on line {line}")
            continue
        if running and head in script.functions:  # a call: what its body assigns is only known by running it
            at = script.functions[head][0]
            script.unsettled(script.assigned_by_call(head), line, f"the function {head} (line {at}, called on line "
                             f"{line})")
        if head in ("if", "elif"):
            rest = stmt.split(None, 1)[1] if " " in stmt else ""
            rest = re.sub(r"\bthen\s*$", "", rest).strip()
            if head == "if":
                parent = running
                frames.append(_Frame(False, False, parent))
            frame = frames[-1] if frames else None
            if frame is None:
                raise InputError(where, f"line {line}", "elif without if")
            if not frame.parent or frame.taken:
                frame.active = False
                continue
            ex.in_test = True
            tested = ex.words(rest)
            ex.in_test = False
            for word in tested:
                why = script.why_unresolved(word)
                if why is not None:
                    found = script.substitution_in(word)
                    assert found is not None
                    raise InputError(where, f"line {line}", f"the test `{rest}` reads {found[1]}, which {why} may "
                                     "set and primus reads but never runs, so which branch runs is unknown; set it "
                                     "outside the block, with a literal value")
            value = condition(tested)
            if value is None:
                script.notes.append(f"line {line}: the test `{rest}` cannot be decided without running it; "
                                    "its first branch is read")
                value = True
            frame.active = value
            frame.taken = value
            continue
        if head == "then" and frames:
            continue
        if head == "else":
            if not frames:
                raise InputError(where, f"line {line}", "else without if")
            frame = frames[-1]
            frame.active = frame.parent and not frame.taken
            frame.taken = True
            continue
        if head == "fi":
            if not frames:
                raise InputError(where, f"line {line}", "fi without if")
            frames.pop()
            continue
        if not running:
            continue
        if head in ("source", ".") and stmt != head:
            sources += 1
            queue[:0] = _source(stmt.split(None, 1)[1], line, script, ex, base_dir, sources)
            continue
        _statement(stmt, line, script, ex)
    if skipped_blocks:
        script.notes.append("not entered (read, never run): " + ", ".join(skipped_blocks))
    return script


def _source(arg: str, line: int, script: Script, ex: Expander, base_dir: Path | None,
            count: int) -> list[tuple[int, str]]:
    """The statements of a sourced file, to be read in place (none when it cannot be read: noted)."""
    words = _raw_words(arg)
    raw = words[0] if words else ""
    rest = split_here(raw)
    expanded = " ".join(ex.words(rest)) if rest else ""
    if count > MAX_SOURCES:
        script.notes.append(f"line {line}: source {raw}: more than {MAX_SOURCES} sourced files; not read")
        return []
    path, why = sourced_path(expanded, base_dir)
    if path is None:
        script.notes.append(f"line {line}: source {raw} is not read: {why}")
        return []
    script.notes.append(f"line {line}: {path.name} sourced: its statements are read here (relative to the "
                        "script's folder; never run)")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        script.notes.append(f"line {line}: source {raw} is not read: {exc.strerror}")
        return []
    return statements(text, str(path))


def _statement(stmt: str, line: int, script: Script, ex: Expander) -> None:
    exported = stmt.startswith("export ")
    body = stmt[len("export "):].lstrip() if exported else stmt
    array = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=\((.*)\)\s*$", body, re.S)
    if array:
        name, append, inner = array.groups()
        items = ex.words(inner)
        old = script.variables.get(name)
        base = (old if isinstance(old, list) else ([old] if old else [])) if append else []
        script.variables[name] = bounded(name, base + items, ex.where, line)
        script.defined_at.setdefault(name, line)
        return
    words_text = body
    assign = _ASSIGN.match(words_text.split(None, 1)[0]) if words_text else None
    if assign and _only_assignments(words_text):
        for word in _raw_words(words_text):
            match = _ASSIGN.match(word)
            assert match is not None
            name, append, raw_value = match.groups()
            value = " ".join(ex.words(raw_value)) if raw_value else ""  # no splitting in an assignment
            old = script.variables.get(name)
            if append and isinstance(old, list):
                script.variables[name] = bounded(name, [*old, value], ex.where, line)
            else:
                script.variables[name] = bounded(name, (str(old or "") + value) if append else value, ex.where, line)
            script.defined_at.setdefault(name, line)
            if exported:
                script.exported.append((name, script.restore(value)))
        return
    if exported:
        return  # `export NAME` of an existing variable
    words = ex.words(body)
    prefix: list[str] = []
    while words and _ASSIGN.match(words[0]):
        prefix.append(words.pop(0))
    if words:
        script.commands.append(Command(line, tuple(words), tuple(prefix)))


def _raw_words(text: str) -> list[str]:
    """Words of an assignment statement before expansion (quotes kept), split at unquoted blanks."""
    out: list[str] = []
    cur, quote, i = "", "", 0
    while i < len(text):
        c = text[i]
        if quote:
            cur += c
            if c == "\\" and quote == '"' and i + 1 < len(text):
                cur += text[i + 1]
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote, cur = c, cur + c
        elif c == "\\" and i + 1 < len(text):
            cur += text[i:i + 2]
            i += 1
        elif c.isspace():
            if cur:
                out.append(cur)
            cur = ""
        elif c == "$" and text.startswith("$(", i):
            end = _matching(text, i + 1)
            cur += text[i:end + 1]
            i = end
        elif c == "`":  # a backtick substitution is one word, like $(...)
            end = text.find("`", i + 1)
            end = len(text) - 1 if end < 0 else end
            cur += text[i:end + 1]
            i = end
        else:
            cur += c
        i += 1
    if cur:
        out.append(cur)
    return out


def _only_assignments(text: str) -> bool:
    return all(_ASSIGN.match(w) for w in _raw_words(text))
