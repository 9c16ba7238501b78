"""CEL device selectors with the Kubernetes DRA environment, over cel-expr-python (cel-cpp).

The only module that imports the CEL library: the allocator sees ``Selectors`` (compile, match)
and plain strings for errors, so the library can be swapped behind it.

The environment (as dynamic-resource-allocation/cel builds it for v1.37):

- one variable, ``device``: ``driver`` (string), ``attributes[domain][id]`` (int, bool, string,
  or a semantic version), ``capacity[domain][id]`` (a quantity) and ``allowMultipleAllocations``.
  A name without a domain is filed under the device's driver. An unknown domain is an empty map
  (so ``device.attributes['other.io'].x`` is "no such key", and ``has()``/``.?`` read false):
  every string literal of the expression that is not a domain of the device is added as an empty
  map, which covers the written forms. An unknown id is the runtime error "no such key".
- Kubernetes' quantity library: ``quantity(s)``, ``isQuantity(s)``, and on a quantity
  ``isGreaterThan``, ``isLessThan``, ``compareTo``, ``add``, ``sub`` (quantity or int), ``sign``,
  ``isInteger``, ``asInteger``, ``asApproximateFloat``. No ``<`` or ``==`` on quantities, as there.
- Kubernetes' semver library: ``semver(s[, normalize])``, ``isSemver(s[, normalize])``, and
  ``major``, ``minor``, ``patch``, ``isGreaterThan``, ``isLessThan``, ``compareTo``; ``==``
  compares versions (build metadata ignored).
- The standard library (with ``matches``), optional types (``.?``, ``orValue``), ``cel.bind``
  and the strings extension. Not provided (a selector using them gets a compile error naming the
  function): the Kubernetes lists, sets, regex ``find``, IP, CIDR, URL and format libraries,
  two-variable comprehensions and ``includes`` (DRAListTypeAttributes, alpha).

Quantities and versions are CEL maps tagged with a key no attribute can have (``__quantity__``,
``__semver__``): the library converts no opaque Python values, and a tagged map keeps ``==`` on
versions structural.

Bounds (the library has no cost limit): an expression longer than 10 KiB is refused, as the
apiserver would; so is one whose comprehensions nest deeper than the bound below (their
iterations multiply). Each evaluation spends one unit of a per-allocation ``Budget`` (budget.py),
and verdicts are memoised per (expression, device identity with its slice's generation) on the
``Selectors`` object, which its owner keeps across cycles (no process-wide cache): a verdict does
not depend on the pod.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import cel_expr_python.cel as cel
from cel_expr_python.ext.ext_bindings import ExtBindings
from cel_expr_python.ext.ext_optional import ExtOptional
from cel_expr_python.ext.ext_strings import ExtStrings

from ..model.dra import AttributeValue, DeviceCapacity, Version
from ..resources.requests import parse_quantity
from . import semver
from .budget import Budget

MAX_EXPRESSION_BYTES: Final = 10 * 1024
# Comprehensions (all, exists, map, filter...) nested deeper than this are refused: each level
# multiplies the iterations, and the device's maps alone have up to 32 entries.
MAX_COMPREHENSION_DEPTH: Final = 3
# Memoised verdicts and compiled expressions kept before the memo is dropped and rebuilt (a few
# MB at most).
MEMO_LIMIT: Final = 200_000
# Devices kept converted for the library (a few KB each, as Python maps and inside the library).
DEVICE_LIMIT: Final = 20_000

QUANTITY_TAG: Final = "__quantity__"
SEMVER_TAG: Final = "__semver__"
_MACROS: Final = frozenset(
    {"all", "exists", "exists_one", "map", "filter", "transformList", "transformMap"}
)

# (driver, pool, slice name, pool generation, device name): a device as one generation of its
# pool publishes it.
DeviceKey = tuple[str, str, str, int, str]


class _Compiled:
    __slots__ = ("domains", "program")

    def __init__(self, program: cel.Expression, domains: frozenset[str]) -> None:
        self.program = program
        self.domains = domains


class Selectors:
    """Compiled selectors and their verdicts per device. Owned by the caller (one per scheduler,
    kept across cycles); not shared between threads."""

    __slots__ = ("_activations", "_compiled", "_devices", "_env", "_verdicts", "evaluations")

    def __init__(self) -> None:
        self._env = _new_env()
        self._compiled: dict[str, _Compiled | str] = {}
        self._verdicts: dict[tuple[str, DeviceKey], bool | str] = {}
        self._devices: dict[DeviceKey, dict[str, Any] | str] = {}
        # A device converted once for the library, per set of empty domains its selectors add.
        self._activations: dict[tuple[DeviceKey, frozenset[str]], cel.Activation] = {}
        # Evaluations done (memo hits excluded), for measurements.
        self.evaluations = 0

    def compile_error(self, expression: str) -> str | None:
        """Why ``expression`` cannot be used, or None when it compiles."""
        compiled = self._compile(expression)
        return compiled if isinstance(compiled, str) else None

    def matches(
        self,
        expression: str,
        key: DeviceKey,
        attributes: Mapping[str, AttributeValue],
        capacity: Mapping[str, DeviceCapacity],
        allow_multiple_allocations: bool,
        budget: Budget,
    ) -> bool | str:
        """Whether the device matches: True, False, or the error (compile or run time; the
        caller words it). An exhausted budget is reported by the budget, not here."""
        memo_key = (expression, key)
        found = self._verdicts.get(memo_key)
        if found is not None:
            return found
        compiled = self._compile(expression)
        if isinstance(compiled, str):
            return compiled
        if not budget.spend_evaluation():
            return False
        data = self._device_data(key, attributes, capacity, allow_multiple_allocations)
        if isinstance(data, str):
            verdict: bool | str = data
        else:
            verdict = self._evaluate(key, compiled, data)
        self.evaluations += 1
        if len(self._verdicts) >= MEMO_LIMIT:
            self._verdicts.clear()
        self._verdicts[memo_key] = verdict
        return verdict

    def _compile(self, expression: str) -> _Compiled | str:
        found = self._compiled.get(expression)
        if found is not None:
            return found
        compiled = self._compile_new(expression)
        if len(self._compiled) >= MEMO_LIMIT:
            self._compiled.clear()
        self._compiled[expression] = compiled
        return compiled

    def _compile_new(self, expression: str) -> _Compiled | str:
        size = len(expression.encode())
        if size > MAX_EXPRESSION_BYTES:
            return f"expression of {size} bytes is longer than the {MAX_EXPRESSION_BYTES} allowed"
        literals, depth = _scan(expression)
        if depth > MAX_COMPREHENSION_DEPTH:
            return (
                f"comprehensions nested {depth} deep: more than {MAX_COMPREHENSION_DEPTH} "
                "would exceed the cost limit"
            )
        try:
            program = self._env.compile(expression)
        except Exception as exc:  # RuntimeError with the checker's message
            return _clean(str(exc))
        kind = program.return_type()
        if kind != cel.Type.BOOL and kind != cel.Type.DYN:
            return f"must evaluate to bool, not {kind.name().lower()}"
        return _Compiled(program, literals)

    def _device_data(
        self,
        key: DeviceKey,
        attributes: Mapping[str, AttributeValue],
        capacity: Mapping[str, DeviceCapacity],
        allow_multiple_allocations: bool,
    ) -> dict[str, Any] | str:
        found = self._devices.get(key)
        if found is not None:
            return found
        data = _to_cel_device(key[0], attributes, capacity, allow_multiple_allocations)
        if len(self._devices) >= DEVICE_LIMIT:
            self._devices.clear()
        self._devices[key] = data
        return data

    def _evaluate(self, key: DeviceKey, compiled: _Compiled, data: dict[str, Any]) -> bool | str:
        # The expression's literals that are not domains of the device become empty maps.
        extra = frozenset(
            d for d in compiled.domains if d not in data["attributes"] or d not in data["capacity"]
        )
        activation = self._activations.get((key, extra))
        if activation is None:
            if extra:
                data = dict(data)
                data["attributes"] = {**{d: {} for d in extra}, **data["attributes"]}
                data["capacity"] = {**{d: {} for d in extra}, **data["capacity"]}
            try:
                activation = self._env.Activation({"device": data})
            except Exception as exc:  # the library raises for values it cannot convert
                return _clean(str(exc))
            if len(self._activations) >= DEVICE_LIMIT:
                self._activations.clear()
            self._activations[(key, extra)] = activation
        try:
            value = compiled.program.eval(activation)
        except Exception as exc:  # errors are values; anything raised is one too
            return _clean(str(exc))
        kind = value.type()
        if kind == cel.Type.ERROR:
            return _runtime_message(str(value.value()))
        if kind != cel.Type.BOOL:
            return f"expression must evaluate to bool, got {kind.name().lower()}"
        return bool(value.value())


def _to_cel_device(
    driver: str,
    attributes: Mapping[str, AttributeValue],
    capacity: Mapping[str, DeviceCapacity],
    allow_multiple_allocations: bool,
) -> dict[str, Any] | str:
    attrs: dict[str, dict[str, Any]] = {}
    for name, value in attributes.items():
        domain, ident = split_name(name, driver)
        if isinstance(value, Version):
            try:
                attrs.setdefault(domain, {})[ident] = _semver_value(semver.parse(value.value))
            except semver.SemverError as exc:
                return f"attribute {name}: {exc}"
        else:
            attrs.setdefault(domain, {})[ident] = value
    caps: dict[str, dict[str, Any]] = {}
    for name, cap in capacity.items():
        domain, ident = split_name(name, driver)
        try:
            caps.setdefault(domain, {})[ident] = _quantity_value(parse_quantity(cap.value))
        except ValueError as exc:
            return f"capacity {name}: {exc}"
    return {
        "driver": driver,
        "attributes": attrs,
        "capacity": caps,
        "allowMultipleAllocations": allow_multiple_allocations,
    }


def split_name(name: str, driver: str) -> tuple[str, str]:
    """A qualified name's (domain, id); a bare id is in the driver's domain."""
    domain, slash, ident = name.rpartition("/")
    return (domain, ident) if slash else (driver, name)


# cel-cpp's text for a missing map key, and the hint kube-scheduler appends to cel-go's
# "no such key: <id>" (dynamic-resource-allocation/cel/errors.go): the reason reads as there.
_MISSING_KEY: Final = re.compile(r'Key not found in map ?: ?"?([^"]*)"?')
_MISSING_KEY_HINT: Final = (
    ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check "
    "with has() for optional fields"
)


def _runtime_message(text: str) -> str:
    text = _MISSING_KEY.sub(lambda m: f"no such key: {m.group(1)}", _clean(text))
    if "no such key:" in text:
        return text + _MISSING_KEY_HINT
    return text


def _clean(text: str) -> str:
    """The library's status text without its code prefix and suffix."""
    for code in ("INVALID_ARGUMENT: ", "NOT_FOUND: ", "UNKNOWN: ", "OUT_OF_RANGE: "):
        text = text.removeprefix(code)
    return text.removesuffix(" [INVALID_ARGUMENT]").strip()


def _scan(expression: str) -> tuple[frozenset[str], int]:
    """The string literals of ``expression`` and how deep its comprehension macros nest, read
    with a lexer of quotes and brackets (the compiler checks the rest)."""
    literals: set[str] = set()
    stack: list[bool] = []  # one per open bracket: is it a macro's argument list?
    depth = deepest = 0
    i, n = 0, len(expression)
    while i < n:
        c = expression[i]
        if c in "'\"":
            quote = expression[i : i + 3] if expression[i : i + 3] in ("'''", '"""') else c
            j = i + len(quote)
            text: list[str] = []
            while j < n and not expression.startswith(quote, j):
                if expression[j] == "\\" and j + 1 < n:
                    text.append(expression[j : j + 2])
                    j += 2
                    continue
                text.append(expression[j])
                j += 1
            literals.add("".join(text))
            i = j + len(quote)
            continue
        if c in "([{":
            macro = c == "(" and _macro_before(expression, i)
            stack.append(macro)
            if macro:
                depth += 1
                deepest = max(deepest, depth)
        elif c in ")]}" and stack and stack.pop():
            depth -= 1
        i += 1
    return frozenset(literals), deepest


def _macro_before(expression: str, paren: int) -> bool:
    j = paren
    while j > 0 and expression[j - 1] == " ":
        j -= 1
    k = j
    while k > 0 and (expression[k - 1].isalnum() or expression[k - 1] == "_"):
        k -= 1
    before = expression[:k].rstrip()
    return expression[k:j] in _MACROS and before.endswith(".")


# ---- the Kubernetes quantity and semver libraries -----------------------------------------------


def _quantity_value(value: Decimal) -> dict[str, str]:
    return {QUANTITY_TAG: str(value.normalize())}


def _semver_value(version: semver.Semver) -> dict[str, str]:
    return {SEMVER_TAG: version.canonical()}


def _quantity(value: Any) -> Decimal:
    if isinstance(value, dict) and QUANTITY_TAG in value:
        return Decimal(value[QUANTITY_TAG])
    raise ValueError("no matching overload: not a quantity")


def _version(value: Any) -> semver.Semver:
    if isinstance(value, dict) and SEMVER_TAG in value:
        return semver.parse(value[SEMVER_TAG])
    raise ValueError("no matching overload: not a semver")


def _sign(number: Decimal | int) -> int:
    return (number > 0) - (number < 0)


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, dict) and SEMVER_TAG in a:
        return _version(a).compare(_version(b))
    return _sign(_quantity(a) - _quantity(b))


def _new_quantity(text: str) -> dict[str, str]:
    try:
        return _quantity_value(parse_quantity(text))
    except ValueError:
        raise ValueError(f"invalid quantity {text!r}") from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True


def _new_semver(text: str, normalize: bool = False) -> dict[str, str]:
    try:
        return _semver_value(semver.parse(text, normalize))
    except semver.SemverError as exc:
        raise ValueError(f"invalid semver {text!r}: {exc}") from None


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        semver.parse(text, normalize)
    except semver.SemverError:
        return False
    return True


def _as_integer(value: Any) -> int:
    number = _quantity(value)
    if number != number.to_integral_value() or not -(2**63) <= number < 2**63:
        raise ValueError("cannot convert value to integer")
    return int(number)


def _arith(sign: int) -> Callable[[Any, Any], dict[str, str]]:
    def apply(a: Any, b: Any) -> dict[str, str]:
        other = Decimal(b) if isinstance(b, int) else _quantity(b)
        try:
            return _quantity_value(_quantity(a) + sign * other)
        except InvalidOperation:
            raise ValueError("quantity out of range") from None

    return apply


def _new_env() -> cel.Env:
    t = cel.Type
    tagged = t.Map(t.STRING, t.DYN)

    def member(
        name: str, result: cel.Type, args: list[cel.Type], impl: Callable[..., Any]
    ) -> cel.Overload:
        suffix = "_".join(a.name().lower() for a in args)
        return cel.Overload(
            f"{name}_member_{suffix}", result, [tagged, *args], is_member=True, impl=impl
        )

    def overload(
        name: str, result: cel.Type, args: list[cel.Type], impl: Callable[..., Any]
    ) -> cel.Overload:
        return cel.Overload(f"{name}_{len(args)}", result, args, impl=impl)

    functions = [
        cel.FunctionDecl("quantity", [overload("quantity", tagged, [t.STRING], _new_quantity)]),
        cel.FunctionDecl("isQuantity", [overload("isQuantity", t.BOOL, [t.STRING], _is_quantity)]),
        cel.FunctionDecl(
            "semver",
            [
                overload("semver", tagged, [t.STRING], _new_semver),
                overload("semver", tagged, [t.STRING, t.BOOL], _new_semver),
            ],
        ),
        cel.FunctionDecl(
            "isSemver",
            [
                overload("isSemver", t.BOOL, [t.STRING], _is_semver),
                overload("isSemver", t.BOOL, [t.STRING, t.BOOL], _is_semver),
            ],
        ),
        cel.FunctionDecl(
            "isGreaterThan",
            [member("isGreaterThan", t.BOOL, [tagged], lambda a, b: _compare(a, b) > 0)],
        ),
        cel.FunctionDecl(
            "isLessThan", [member("isLessThan", t.BOOL, [tagged], lambda a, b: _compare(a, b) < 0)]
        ),
        cel.FunctionDecl("compareTo", [member("compareTo", t.INT, [tagged], _compare)]),
        cel.FunctionDecl(
            "add",
            [member("add", tagged, [tagged], _arith(1)), member("add", tagged, [t.INT], _arith(1))],
        ),
        cel.FunctionDecl(
            "sub",
            [
                member("sub", tagged, [tagged], _arith(-1)),
                member("sub", tagged, [t.INT], _arith(-1)),
            ],
        ),
        cel.FunctionDecl("sign", [member("sign", t.INT, [], lambda a: _sign(_quantity(a)))]),
        cel.FunctionDecl(
            "isInteger",
            [
                member(
                    "isInteger",
                    t.BOOL,
                    [],
                    lambda a: _quantity(a) == _quantity(a).to_integral_value(),
                )
            ],
        ),
        cel.FunctionDecl("asInteger", [member("asInteger", t.INT, [], _as_integer)]),
        cel.FunctionDecl(
            "asApproximateFloat",
            [member("asApproximateFloat", t.DOUBLE, [], lambda a: float(_quantity(a)))],
        ),
        cel.FunctionDecl("major", [member("major", t.INT, [], lambda a: _version(a).major)]),
        cel.FunctionDecl("minor", [member("minor", t.INT, [], lambda a: _version(a).minor)]),
        cel.FunctionDecl("patch", [member("patch", t.INT, [], lambda a: _version(a).patch)]),
    ]
    device = t.Map(t.STRING, t.DYN)
    return cel.NewEnv(
        variables={"device": device},
        extensions=[
            ExtOptional(),
            ExtBindings(),
            ExtStrings(),
        ],
        functions=functions,
    )
