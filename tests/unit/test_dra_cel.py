"""DRA device selectors: the Kubernetes CEL environment over cel-expr-python (core/dra/cel.py)."""

from __future__ import annotations

import pytest

from scheduler.core.dra import semver
from scheduler.core.dra.budget import Budget
from scheduler.core.dra.cel import MAX_EXPRESSION_BYTES, DeviceKey, Selectors
from scheduler.core.model.dra import AttributeValue, DeviceCapacity, Version
from scheduler.core.settings import DraLimits

DRIVER = "gpu.nvidia.com"
KEY: DeviceKey = (DRIVER, "node-a", "slice-0", 1, "gpu-0")
ATTRIBUTES: dict[str, AttributeValue] = {
    "type": "gpu",
    "uuid": "GPU-0",
    "productName": "NVIDIA H100 80GB HBM3",
    "driverVersion": Version("550.54.15"),
    "resource.kubernetes.io/pcieRoot": "pci0000:00",
    "resource.kubernetes.io/numaNode": 0,
}
CAPACITY = {"memory": DeviceCapacity("80Gi")}


def match(expression: str, selectors: Selectors | None = None, key: DeviceKey = KEY) -> bool | str:
    selectors = selectors or Selectors()
    error = selectors.compile_error(expression)
    if error is not None:
        return f"compile: {error}"
    return selectors.matches(expression, key, ATTRIBUTES, CAPACITY, False, Budget(DraLimits()))


@pytest.mark.parametrize(
    "expression",
    [
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
        "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'",
        "device.attributes['resource.kubernetes.io'].numaNode == 0",
        "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))",
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) == 0",
        "device.capacity['gpu.nvidia.com'].memory.sub(quantity('80Gi')).sign() == 0",
        "device.capacity['gpu.nvidia.com'].memory.asInteger() == 85899345920",
        "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))",
        "device.attributes['gpu.nvidia.com'].driverVersion == semver('550.54.15+build.1')",
        "device.attributes['gpu.nvidia.com'].driverVersion.major() == 550",
        "semver('v1.2', true) == semver('1.2.0')",
        "isSemver('1.2.3-rc.1') && !isSemver('1.2') && isQuantity('1Gi')",
        "device.attributes['gpu.nvidia.com'].?missing.orValue('none') == 'none'",
        "cel.bind(a, device.attributes['gpu.nvidia.com'], a.type == 'gpu' && a.uuid == 'GPU-0')",
        "!has(device.attributes['gpu.nvidia.com'].missing)",
        "device.attributes['gpu.nvidia.com'].productName.lowerAscii().contains('h100')",
        "device.attributes['gpu.nvidia.com'].productName.matches('^NVIDIA H1[0-9]{2}')",
        # An unknown domain is an empty map: has() reads false, .? reads none.
        "!has(device.attributes['other.example.com'].x)",
        "device.attributes['other.example.com'].?x.orValue(1) == 1",
        "device.allowMultipleAllocations == false",
    ],
)
def test_the_kubernetes_dra_environment(expression: str) -> None:
    assert match(expression) is True


def test_runtime_errors_are_reasons_with_kubernetes_hint() -> None:
    verdict = match("device.attributes['gpu.nvidia.com'].missing == 'x'")
    # kube-scheduler's words (cel-go's error and the hint it appends)
    assert verdict == (
        "no such key: missing. consider using CEL optional chaining (.? followed by orValue()) "
        "or guarding the check with has() for optional fields"
    )
    assert (
        "no matching overload"
        in str(
            match("device.attributes['gpu.nvidia.com'].uuid.isGreaterThan(quantity('1'))")
        ).lower()
    )
    assert "not a semver" in str(match("device.capacity['gpu.nvidia.com'].memory.major() == 1"))
    assert "bool" in str(match("device.attributes['resource.kubernetes.io'].numaNode"))


def test_compile_errors_and_bounds_are_reasons() -> None:
    assert str(match("device.driver ==")).startswith("compile: ")
    assert "undeclared" in str(match("nodevice.driver == 'x'"))
    assert "bool" in str(match("device.driver"))
    assert "longer than" in str(match("true || " + "x" * MAX_EXPRESSION_BYTES))
    deep = "[1].all(a, [1].all(b, [1].all(c, [1].all(d, d == 1))))"
    assert "nested 4 deep" in str(match(deep))
    assert match("[1].all(a, [1].all(b, [1].all(c, c == 1)))") is True
    # Brackets inside strings and sibling (not nested) comprehensions do not count.
    assert match("'(.all(' != '' && [1].all(a, a == 1) && [1].exists(b, b == 1)") is True


def test_verdicts_are_memoised_per_device_and_generation() -> None:
    selectors = Selectors()
    expression = "device.attributes['gpu.nvidia.com'].type == 'gpu'"
    for _ in range(3):
        assert match(expression, selectors) is True
    assert selectors.evaluations == 1
    newer = (DRIVER, "node-a", "slice-0", 2, "gpu-0")
    assert match(expression, selectors, newer) is True
    assert selectors.evaluations == 2


def test_evaluations_spend_the_budget() -> None:
    selectors = Selectors()
    budget = Budget(DraLimits(evaluations=2))
    expression = "device.attributes['gpu.nvidia.com'].type == 'gpu'"
    for i in range(2):
        key = (DRIVER, "p", "s", 1, f"gpu-{i}")
        assert selectors.matches(expression, key, ATTRIBUTES, CAPACITY, False, budget) is True
    assert not budget.exhausted
    key = (DRIVER, "p", "s", 1, "gpu-9")
    assert selectors.matches(expression, key, ATTRIBUTES, CAPACITY, False, budget) is False
    assert budget.exhausted


def test_a_bad_version_attribute_is_a_runtime_reason() -> None:
    selectors = Selectors()
    verdict = selectors.matches("true", KEY, {"v": Version("1.2")}, {}, False, Budget(DraLimits()))
    assert isinstance(verdict, str) and "attribute v" in verdict


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("1.0.0-alpha", "1.0.0-alpha.1"),
        ("1.0.0-alpha.1", "1.0.0-alpha.beta"),
        ("1.0.0-beta.2", "1.0.0-beta.11"),
        ("1.0.0-rc.1", "1.0.0"),
        ("1.9.0", "1.10.0"),
    ],
)
def test_semver_precedence(low: str, high: str) -> None:
    assert semver.parse(low).compare(semver.parse(high)) == -1
    assert semver.parse(high).compare(semver.parse(low)) == 1


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-01", "1.2.3+", "v1.2.3", "1.2.3-a..b"])
def test_semver_is_strict(text: str) -> None:
    with pytest.raises(semver.SemverError):
        semver.parse(text)
