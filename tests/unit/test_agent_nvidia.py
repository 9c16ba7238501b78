"""The node agent's nvidia-smi parsers, on real captured outputs (tests/data/nvidia-smi/README.md
names the machine and source of each) and on malformed ones, which must fail naming file and
line. Every capture is also carried through to the annotation and read back with the scheduler's
own inventory parser, checking the pair scores the core will place pods with."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.agent.annotation import from_nvidia
from scheduler.agent.nvidia import ProbeError, parse_query, parse_topo
from scheduler.core.formats.gpus import encode
from scheduler.core.resources.inventory import check_annotation
from tests.topologies import DGX1_V100, PCIE8

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
CAPTURES = sorted(p.name for p in DATA.glob("*.topo.txt"))


def topo(name: str) -> str:
    return (DATA / name).read_text()


def test_every_capture_is_named_in_the_sources_readme() -> None:
    readme = (DATA / "README.md").read_text()
    assert len(CAPTURES) >= 5
    for name in CAPTURES:
        assert f"`{name}`" in readme, name


# (file, GPU count, cells (row, column, code), NUMA per GPU or None when the output has none,
#  NIC row labels the capture contains, pair scores (i, j, score) after the core's parser)
EXPECTED = {
    "dgx1-v100.topo.txt": (
        8,
        [(0, 1, "NV1"), (0, 3, "NV2"), (0, 5, "SYS"), (1, 5, "NV2"), (3, 7, "NV1"), (6, 7, "NV2")],
        [None] * 8,
        ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"],
        [(0, 1, 100), (0, 3, 200), (0, 5, 10), (4, 7, 200)],
    ),
    "h100-sxm5-8gpu.topo.txt": (
        8,
        [(0, 7, "NV18"), (3, 4, "NV18"), (7, 0, "NV18")],
        [0, 0, 0, 0, 1, 1, 1, 1],
        [],
        [(0, 1, 1800), (3, 4, 1800), (6, 7, 1800)],
    ),
    "pcie-8gpu-pix-node-sys.topo.txt": (
        8,
        [(0, 1, "PIX"), (0, 2, "NODE"), (0, 4, "SYS"), (6, 7, "PIX"), (5, 6, "NODE")],
        [0, 0, 0, 0, 1, 1, 1, 1],
        [],
        [(0, 1, 50), (1, 3, 20), (3, 4, 10)],
    ),
    "asus-esc8000a-e12-nics.topo.txt": (
        4,
        [(0, 1, "NODE"), (0, 2, "SYS"), (2, 3, "NODE"), (1, 3, "SYS")],
        [0, 0, 1, 1],
        ["NIC0", "NIC1", "NIC2", "NIC3"],
        [(0, 1, 20), (2, 3, 20), (0, 3, 10)],
    ),
    "rtx4090-8gpu-nics-tabs.topo.txt": (
        8,
        [(0, 1, "SYS"), (6, 7, "SYS"), (3, 4, "SYS")],
        [0, 0, 0, 0, 1, 1, 1, 1],
        ["NIC0", "NIC1"],
        [(0, 1, 10), (5, 6, 10)],
    ),
}


def test_every_capture_has_expectations() -> None:
    assert sorted(EXPECTED) == CAPTURES


@pytest.mark.parametrize("name", CAPTURES)
def test_capture_parses_to_the_gpu_block(name: str) -> None:
    size, cells, numa, nic_rows, _ = EXPECTED[name]
    text = topo(name)
    matrix = parse_topo(text, name)
    assert matrix.size == size
    for row, column, code in cells:
        assert matrix.links[row][column] == code, (row, column)
    assert [r.numa for r in matrix.rows] == numa
    for i in range(size):
        assert matrix.links[i][i] == "X"
        assert all(matrix.links[i][j] == matrix.links[j][i] for j in range(size))
    # NIC rows are in the capture but not in the matrix (which is GPU x GPU only).
    for label in nic_rows:
        assert any(line.split()[:1] == [label] for line in text.splitlines()), label
    assert all(len(row) == size for row in matrix.links)


@pytest.mark.parametrize("name", CAPTURES)
def test_capture_round_trips_through_the_schedulers_inventory_parser(name: str) -> None:
    size, _, numa, _, scores = EXPECTED[name]
    value = encode(from_nvidia(parse_topo(topo(name), name), None))
    inventory = check_annotation(value, "gpu-1")
    assert inventory.vendor == "nvidia"
    assert [d.index for d in inventory.devices] == list(range(size))
    # Without a device list the scheduler names the GPUs after the node.
    assert inventory.devices[0].uuid == "gpu-1-gpu-0"
    assert [d.numa for d in inventory.devices] == numa
    for i, j, score in scores:
        assert inventory.topology.scores[i][j] == score == inventory.topology.scores[j][i]


def test_dgx1_capture_is_the_hybrid_cube_mesh_the_tests_assume() -> None:
    # tests/topologies.py was written from the topology facts; the real machine agrees.
    assert parse_topo(topo("dgx1-v100.topo.txt"), "x").links == DGX1_V100
    assert parse_topo(topo("pcie-8gpu-pix-node-sys.topo.txt"), "x").links == PCIE8


def test_dgx1_annotation_steers_the_core_to_nvlink_pairs() -> None:
    value = encode(from_nvidia(parse_topo(topo("dgx1-v100.topo.txt"), "x"), None))
    topology = check_annotation(value, "dgx").topology
    pair = topology.best_set(0xFF, 2)
    assert pair is not None and pair.score == 200  # an NV2 pair
    four = topology.best_set(0xFF, 4)
    assert four is not None and four.indices in ((0, 1, 2, 3), (4, 5, 6, 7))


def test_query_adds_uuids_and_memory() -> None:
    matrix = parse_topo(topo("dgx1-v100.topo.txt"), "t")
    gpus = parse_query((DATA / "dgx1-v100.query.csv").read_text(), "q")
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[2].uuid == "GPU-3f1c2a10-0d6e-4b7a-9c41-5e2a8b7d0003"
    assert gpus[2].memory_mib == 16160 and gpus[2].bus_id == "00000000:0A:00.0"
    inventory = check_annotation(encode(from_nvidia(matrix, gpus, "Tesla-V100-SXM2-16GB")), "n")
    assert inventory.model == "Tesla-V100-SXM2-16GB"
    assert inventory.devices[7].uuid == "GPU-3f1c2a10-0d6e-4b7a-9c41-5e2a8b7d0008"
    assert inventory.devices[7].memory_mib == 16160


def test_query_and_matrix_must_list_the_same_gpus() -> None:
    matrix = parse_topo(topo("asus-esc8000a-e12-nics.topo.txt"), "asus.txt")
    gpus = parse_query((DATA / "dgx1-v100.query.csv").read_text(), "dgx.csv")
    with pytest.raises(ProbeError, match=r"dgx\.csv lists GPUs 0, 1, 2, 3, 4, 5, 6, 7, but "):
        from_nvidia(matrix, gpus, None, "dgx.csv")


def test_query_tolerates_a_header_units_and_unknown_memory() -> None:
    text = (
        "index, uuid, memory.total [MiB], pci.bus_id\n"
        "1, GPU-b, [N/A], 00000000:07:00.0\n"
        "0, GPU-a, 81559 MiB, 00000000:18:00.0\n"
    )
    gpus = parse_query(text, "q")
    assert [(g.index, g.uuid, g.memory_mib) for g in gpus] == [
        (0, "GPU-a", 81559),
        (1, "GPU-b", None),
    ]


# ---- real-world noise --------------------------------------------------------------------------


def test_ansi_colours_and_crlf_are_ignored() -> None:
    text = topo("h100-sxm5-8gpu.topo.txt")
    header, rest = text.split("\n", 1)
    coloured = f"\x1b[4m{header}\x1b[0m\n{rest}".replace("\n", "\r\n")
    assert parse_topo(coloured, "x").links == parse_topo(text, "x").links


def test_glued_nic_cells_do_not_shift_gpu_cells_or_numa() -> None:
    # Drivers printing ten or more NICs drop separators between NIC cells ("NIC8NIC9",
    # "NODENODE") and let the last one run into the CPU affinity ("PH0-115"). Derived from the
    # real ASUS capture by gluing its NIC cells that way.
    lines = topo("asus-esc8000a-e12-nics.topo.txt").splitlines()
    lines[0] = lines[0].replace("NIC2    NIC3", "NIC2NIC3")
    lines[1] = lines[1].replace(
        "NODE    NODE    SYS     SYS     0-31", "NODENODE    SYS     SYS0-31"
    )
    glued = parse_topo("\n".join(lines), "x")
    assert glued.links == parse_topo(topo("asus-esc8000a-e12-nics.topo.txt"), "x").links
    assert [r.numa for r in glued.rows] == [0, 0, 1, 1]


def test_a_numa_range_means_unknown() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    text += "GPU0\t X \tNV12\t0-115\t0-3\t\tN/A\nGPU1\tNV12\t X \t0-115\t0-3\t\tN/A\n"
    assert [r.numa for r in parse_topo(text, "x").rows] == [None, None]


def test_single_gpu_machine() -> None:
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-11\t0\n\nLegend:\n\n  X    = Self\n"
    matrix = parse_topo(text, "x")
    assert matrix.links == [["X"]] and matrix.rows[0].numa == 0


# ---- malformed input: a clear error naming file and line ---------------------------------------


def _edit(name: str, line: int, old: str, new: str) -> str:
    lines = topo(name).splitlines()
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return "\n".join(lines) + "\n"


def test_unknown_code_names_file_line_row_and_column() -> None:
    text = _edit("dgx1-v100.topo.txt", 3, "NV1 ", "NVX ")
    with pytest.raises(ProbeError) as exc:
        parse_topo(text, "dgx1.txt")
    assert str(exc.value) == "dgx1.txt:3: row GPU1, column GPU0: unknown link code 'NVX'"


def test_asymmetric_matrix_names_both_lines() -> None:
    text = _edit("dgx1-v100.topo.txt", 2, "NV2     NV2", "NV1     NV2")
    with pytest.raises(ProbeError) as exc:
        parse_topo(text, "dgx1.txt")
    assert str(exc.value) == (
        "dgx1.txt:2: GPU0 to GPU3 is NV1, but line 5 says GPU3 to GPU0 is NV2"
    )


def test_missing_rows_are_named() -> None:
    text = "\n".join(topo("h100-sxm5-8gpu.topo.txt").splitlines()[:7])
    with pytest.raises(
        ProbeError, match=r"^h100\.txt: no row for GPU6, GPU7 \(the header on line 1"
    ):
        parse_topo(text, "h100.txt")


def test_short_row_is_named() -> None:
    text = _edit("h100-sxm5-8gpu.topo.txt", 4, "NV18    NV18     X ", " X ")
    with pytest.raises(ProbeError) as exc:
        parse_topo(text, "h.txt")
    assert str(exc.value) == (
        "h.txt:4: row GPU2, column GPU0: X off the diagonal (a cell missing or extra before it?)"
    )
    # Without affinity columns to fill up, the row is short.
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV1\tNV1\nGPU1\tNV1\t X \nGPU2\tNV1\tNV1\t X \n"
    with pytest.raises(
        ProbeError, match=r"^h\.txt:3: row GPU1 has 2 cells, but the header names 3"
    ):
        parse_topo(text, "h.txt")


def test_bad_diagonal_is_named() -> None:
    text = _edit("pcie-8gpu-pix-node-sys.topo.txt", 3, " X ", "PIX")
    with pytest.raises(
        ProbeError, match=r"^p\.txt:3: row GPU1, column GPU1: the diagonal must be X"
    ):
        parse_topo(text, "p.txt")


def test_duplicate_and_extra_rows_are_named() -> None:
    lines = topo("asus-esc8000a-e12-nics.topo.txt").splitlines()
    with pytest.raises(ProbeError, match=r"^a:4: a second row for GPU1 \(first on line 3\)"):
        parse_topo("\n".join([*lines[:3], lines[2], *lines[3:]]), "a")
    extra = lines[4].replace("GPU3", "GPU4", 1)
    with pytest.raises(ProbeError, match=r"^a:6: row GPU4, but the header names 4 GPUs"):
        parse_topo("\n".join([*lines[:5], extra]), "a")


def test_header_with_a_gap_in_gpu_numbers() -> None:
    text = _edit("asus-esc8000a-e12-nics.topo.txt", 1, "GPU2", "GPU5")
    with pytest.raises(
        ProbeError, match=r"^a:1: the header names GPU0, GPU1, GPU5, GPU3; expected"
    ):
        parse_topo(text, "a")


@pytest.mark.parametrize(
    "text,detail",
    [
        ("", "(it is empty)"),
        ("No devices were found\n", "its first line is 'No devices were found'"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            'its first line is "NVIDIA-SMI has failed because',
        ),
    ],
)
def test_no_matrix_at_all(text: str, detail: str) -> None:
    with pytest.raises(ProbeError) as exc:
        parse_topo(text, "out.txt")
    message = str(exc.value)
    assert message.startswith("out.txt: no `nvidia-smi topo -m` matrix: expected a header line")
    assert detail in message


@pytest.mark.parametrize(
    "text,error",
    [
        ("0, GPU-a, 100\n", "q:1: expected 4 comma-separated fields"),
        ("0, GPU-a, 100, 0:1\nx, GPU-b, 100, 0:2\n", "q:2: index 'x' is not a whole number"),
        ("0, GPU-a, 100, 0:1\n\n0, GPU-b, 100, 0:2\n", "q:3: GPU index 0 again (first on line 1)"),
        ("0, GPU-a, lots, 0:1\n", "q:1: memory.total 'lots' is not a number of MiB"),
        ("0, , 100, 0:1\n", "q:1: empty uuid"),
        ("\n", "q: no GPUs listed"),
    ],
)
def test_malformed_query(text: str, error: str) -> None:
    with pytest.raises(ProbeError) as exc:
        parse_query(text, "q")
    assert str(exc.value).startswith(error)
