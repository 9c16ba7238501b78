"""DeviceTaintRules patched into the slices, as kube-scheduler's ResourceSlice tracker does.

kube-scheduler never sees a slice as the driver published it: its allocator lists the slices
of the tracker (k8s.io/dynamic-resource-allocation resourceslice/tracker, ``applyPatches``), in
which every DeviceTaintRule has appended its taint to each device its selector matches. A rule
without a selector matches nothing; otherwise its driver, pool and device name must each equal
the device's when set. Nothing else of the rule counts: its status is the eviction
controller's report, and its taint's effect is judged where a device's own taints are (the
allocator's ``_take``: NoSchedule and NoExecute need a toleration, None and unknown effects do
not). So a rule's taint and a driver's are one thing to the allocator, and this is the one place
rules are applied: the snapshot patches the slices it hands to ``gather_pools``
(snapshot/devices.py ``slices_for``).
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec.structs import replace

from ..model.dra import Device, DeviceTaintRule, ResourceSlice


def with_taint_rules(slice_: ResourceSlice, rules: Sequence[DeviceTaintRule]) -> ResourceSlice:
    """``slice_`` with the taints of the ``rules`` matching its devices appended, in the
    rules' order (the same object when none matches)."""
    applying = [
        rule
        for rule in rules
        if rule.selector is not None
        and rule.selector.driver in ("", slice_.driver)
        and rule.selector.pool in ("", slice_.pool.name)
    ]
    if not applying:
        return slice_
    devices: list[Device] = []
    changed = False
    for device in slice_.devices:
        added = tuple(
            rule.taint
            for rule in applying
            if rule.selector is not None and rule.selector.device in ("", device.name)
        )
        if added:
            device = replace(device, taints=device.taints + added)
            changed = True
        devices.append(device)
    return replace(slice_, devices=tuple(devices)) if changed else slice_
