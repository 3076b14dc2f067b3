"""``x-kubernetes-validations`` rules: CEL, evaluated with cel-python (``celpy``).

The API server evaluates each rule with ``self`` bound to the value at the
rule's place in the object and, on update, ``oldSelf`` bound to the same place
in the stored object. A rule that mentions ``oldSelf`` is a *transition rule*:
it is skipped when there is no old value to compare with (create, or a value
the update does not correlate with an old one).

cel-python implements the CEL standard library (``size``, ``has``, ``matches``,
``startsWith``, the ``all``/``exists``/``filter``/``map`` macros...) but none
of Kubernetes' CEL extension libraries. :data:`EXTENSIONS` registers the
extension functions the project's CRDs use, and no others, so a rule that
needs an unregistered one fails loudly instead of passing by accident.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

if TYPE_CHECKING:  # cel-python (and lark, pendulum, re2 behind it) is imported on first use: every
    # ``kruntimes`` command imports the dev cluster's modules, and the scheduler must start fast
    import celpy
    from celpy import celtypes

_OLD_SELF: Final = re.compile(r"\boldSelf\b")


def split(text: celtypes.StringType, separator: celtypes.StringType, limit: celtypes.IntType | None = None) -> celtypes.ListType:
    """Kubernetes' ``<string>.split(<string>[, <int>])`` (strings extension, Go ``strings.SplitN`` semantics).

    A limit of 0 gives an empty list, a negative one (the default) every part, ``n > 0`` at most ``n``
    parts, the last one unsplit. An empty separator splits into characters.
    """
    from celpy import celtypes

    if not isinstance(text, str) or not isinstance(separator, str):
        raise TypeError("split takes a string separator")
    n = -1 if limit is None else int(limit)
    if n == 0:
        return celtypes.ListType([])
    if separator == "":
        chars = list(text)
        parts = chars if n < 0 or n >= len(chars) else [*chars[: n - 1], "".join(chars[n - 1 :])]
    else:
        parts = text.split(separator) if n < 0 else text.split(separator, n - 1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


EXTENSIONS: Final[Mapping[str, Callable[..., Any]]] = {"split": split}
"""Kubernetes CEL extension functions cel-python lacks, by name: exactly those ``deploy/crds`` rules call."""


@final
@dataclass(frozen=True, slots=True)
class Outcome:
    """One rule's verdict: ``ok``, or why not (``message`` is the rule's message, or the evaluation
    error when ``evaluation_error``: the server words the two causes differently)."""

    ok: bool
    message: str = ""
    evaluation_error: bool = False


@final
class CompiledRule:
    """One ``x-kubernetes-validations`` entry, compiled once and evaluated per write."""

    def __init__(self, rule: Mapping[str, Any]) -> None:
        self.text = str(rule.get("rule", ""))
        self.message = str(rule.get("message") or "")
        self.message_expression = str(rule.get("messageExpression") or "")
        self.reason = str(rule.get("reason") or "FieldValueInvalid")
        self.field_path = str(rule.get("fieldPath") or "")
        self.transition = bool(_OLD_SELF.search(self.text))
        self._program = _program(self.text)
        self._message_program = _program(self.message_expression) if self.message_expression else None
        self._memo: dict[str, Outcome] = {}

    def evaluate(self, value: Any, old: Any, has_old: bool, keys: tuple[str | None, str | None] | None = None) -> Outcome | None:
        """The verdict on ``value`` (``old`` when ``has_old``); None when a transition rule has no old value.

        Rules are pure functions of ``self`` and ``oldSelf``, so verdicts on small values are remembered:
        a Run's status writes re-check its unchanged spec against the same stored spec every time, and
        cel-python's interpreter takes milliseconds per rule.
        """
        if self.transition and not has_old:
            return None
        if keys is None:
            keys = (canonical(value), canonical(old) if has_old else None)
        key = None if keys[0] is None or (self.transition and keys[1] is None) else f"{keys[0]}\x00{keys[1] if self.transition else ''}"
        if key is not None:
            with _memo_lock:
                known = self._memo.get(key)
            if known is not None:
                return known
        outcome = self._evaluate(value, old, has_old)
        if key is not None:
            with _memo_lock:
                if len(self._memo) >= _MEMO_SIZE:
                    self._memo.pop(next(iter(self._memo)))
                self._memo[key] = outcome
        return outcome

    def _evaluate(self, value: Any, old: Any, has_old: bool) -> Outcome:
        try:
            activation: dict[str, Any] = {"self": to_cel(value)}
            if has_old:
                activation["oldSelf"] = to_cel(old)
            result = _run(self._program, activation)
        except _EvalError as exc:
            # kube-apiserver names the rule by its message when it has one (``ruleErrorString``)
            return Outcome(False, f"{exc} evaluating rule: {(self.message or self.text).strip()}", evaluation_error=True)
        from celpy import celtypes

        if not isinstance(result, (bool, celtypes.BoolType)):
            return Outcome(False, f"{self.text}: rule did not evaluate to a bool", evaluation_error=True)
        if bool(result):
            return Outcome(True)
        return Outcome(False, self._failure_message(activation))

    def _failure_message(self, activation: dict[str, Any]) -> str:
        if self._message_program is not None:
            try:
                rendered = _run(self._message_program, activation)
            except _EvalError:
                rendered = None
            if isinstance(rendered, str) and rendered.strip() and "\n" not in rendered:
                return str(rendered)
        return self.message.strip() or f"failed rule: {self.text.strip()}"


class _EvalError(Exception):
    pass


_MEMO_SIZE: Final = 512
_MEMO_MAX_KEY: Final = 16_384
_memo_lock = threading.Lock()


def canonical(value: Any) -> str | None:
    """``value`` as canonical JSON (a memo key), or None when too big to be worth remembering."""
    try:
        key = json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return key if len(key) <= _MEMO_MAX_KEY else None


_lock = threading.Lock()
_env: celpy.Environment | None = None


@functools.lru_cache(maxsize=1024)
def _program(text: str) -> celpy.Runner:
    """Parse ``text`` once; a rule that does not parse raises :class:`ValueError` (a CRD the server refuses)."""
    global _env
    import celpy
    from celpy.celparser import CELParseError

    with _lock:
        if _env is None:
            _env = celpy.Environment()
        try:
            ast = _env.compile(text)
        except CELParseError as exc:
            raise ValueError(f"compilation failed: {exc}") from None
        return _env.program(ast, functions=dict(EXTENSIONS))


_compiled: dict[str, CompiledRule] = {}


def compile_rule(rule: Mapping[str, Any]) -> CompiledRule:
    """The compiled form of one ``x-kubernetes-validations`` entry, shared by every schema that has it."""
    key = json.dumps(rule, sort_keys=True, default=str)
    with _memo_lock:
        found = _compiled.get(key)
    if found is None:
        found = CompiledRule(rule)
        with _memo_lock:
            if len(_compiled) > 4096:
                _compiled.clear()
            found = _compiled.setdefault(key, found)
    return found


def _run(program: celpy.Runner, activation: dict[str, Any]) -> Any:
    from celpy.evaluation import CELEvalError

    try:
        result = program.evaluate(activation)
    except CELEvalError as exc:
        raise _EvalError(_describe(exc)) from None
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, RecursionError) as exc:
        raise _EvalError(str(exc)) from None
    if isinstance(result, CELEvalError):
        raise _EvalError(_describe(result))
    return result


_ROOT_CAUSE: Final = re.compile(r"no such member in mapping: \\?'(?P<member>[^'\\]*)\\?'|no such key: (?P<key>[^\s'\"\\]+)")
"""A missing field, also inside the operands' errors that cel-python quotes (escaped) when both sides
of ``&&`` or ``||`` failed: CEL then answers one of the operands' errors, as kube-apiserver does."""


def _describe(exc: Exception) -> str:
    """The evaluation error as Kubernetes words its usual one (a missing field is ``no such key: x``)."""
    text = " ".join(str(a) for a in exc.args)
    missing = _ROOT_CAUSE.search(text)
    if missing is not None:
        return f"no such key: {missing.group('member') if missing.group('member') is not None else missing.group('key')}"
    first = exc.args[0] if exc.args else exc
    return str(first)[:300]


def warm_up() -> None:
    """Parse and evaluate one rule: cel-python builds its parser and imports its helpers on first use."""
    compile_rule({"rule": "self.a.split('/').exists(p, p.matches('^[a-z]+$')) && self == oldSelf"}).evaluate({"a": "x/y"}, {"a": "x/y"}, True)


def to_cel(value: Any) -> Any:
    """A JSON value as CEL sees it (objects are maps, integers ints, numbers doubles); beyond int64 is an error."""
    from celpy.adapter import json_to_cel

    try:
        return json_to_cel(value)
    except (ValueError, OverflowError) as exc:
        raise _EvalError(f"value out of range: {exc}") from None
