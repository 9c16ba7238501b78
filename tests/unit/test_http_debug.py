"""/debug/pods/... answers this machine's clients only, unless opened (issue 12, item 12)."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request

from scheduler.cli import build_parser
from scheduler.config import Config, parse_config
from scheduler.service.app import settings_from
from scheduler.service.http import ProbeServer, is_loopback
from scheduler.service.metrics import Metrics


def server(debug_from_anywhere: bool = False) -> ProbeServer:
    return ProbeServer(
        "127.0.0.1",
        0,
        Metrics(),
        lambda: (True, "ready"),
        lambda key: {"pod": key, "result": "scheduled"} if key == "ns/a" else None,
        debug_from_anywhere=debug_from_anywhere,
        nominations=lambda: [{"pod": "ns/big", "node": "n", "devices": [0, 1]}],
        nodes=lambda: {"n": {"pods": 1}},
    )


def request_from(peer: str) -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (peer, 40000) if name == "peername" else default
    )
    return make_mocked_request(
        "GET",
        "/debug/pods/ns/a",
        match_info={"namespace": "ns", "name": "a"},
        transport=transport,
    )


@pytest.mark.parametrize(
    ("peer", "local"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.7", False),
        ("192.168.1.2", False),
        ("fe80::1%eth0", False),
        ("::ffff:10.0.0.7", False),
        ("", False),
        (None, False),
        ("not-an-address", False),
    ],
)
def test_is_loopback(peer: str | None, local: bool) -> None:
    assert is_loopback(peer) is local


async def test_a_remote_client_is_refused_by_default() -> None:
    response = await server()._debug_pod(request_from("10.0.0.7"))
    assert response.status == 403
    assert b"debugFromAnywhere" in response.body


async def test_a_local_client_is_answered_by_default() -> None:
    response = await server()._debug_pod(request_from("127.0.0.1"))
    assert response.status == 200
    assert json.loads(response.body)["result"] == "scheduled"


async def test_nominations_are_shown_to_local_clients_only() -> None:
    response = await server()._debug_nominations(request_from("127.0.0.1"))
    assert response.status == 200
    assert json.loads(response.body) == [{"pod": "ns/big", "node": "n", "devices": [0, 1]}]
    assert (await server()._debug_nominations(request_from("10.0.0.7"))).status == 403


async def test_node_sums_are_shown_to_local_clients_only() -> None:
    response = await server()._debug_nodes(request_from("127.0.0.1"))
    assert response.status == 200
    assert json.loads(response.body) == {"n": {"pods": 1}}
    assert (await server()._debug_nodes(request_from("10.0.0.7"))).status == 403


async def test_opened_it_answers_a_remote_client() -> None:
    response = await server(debug_from_anywhere=True)._debug_pod(request_from("10.0.0.7"))
    assert response.status == 200


async def test_over_a_real_socket_loopback_is_answered_and_probes_stay_open() -> None:
    probe = server()
    port = await probe.start()
    try:
        for path, status in [
            ("/debug/pods/ns/a", 200),
            ("/debug/pods/ns/none", 404),
            ("/debug/nominations", 200),
            ("/healthz", 200),
            ("/metrics", 200),
        ]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
            await writer.drain()
            head = (await reader.readline()).decode()
            writer.close()
            assert head.split()[1] == str(status), (path, head)
    finally:
        await probe.stop()


def test_config_field_and_flag() -> None:
    assert Config().run.debug_from_anywhere is False
    assert parse_config({"run": {"debugFromAnywhere": True}}).run.debug_from_anywhere is True
    args = build_parser().parse_args(["run", "--debug-from-anywhere"])
    assert args.debug_from_anywhere is True
    assert build_parser().parse_args(["run"]).debug_from_anywhere is False
    opened = settings_from(Config(), None, None, debug_from_anywhere=args.debug_from_anywhere)
    assert opened.run.debug_from_anywhere is True
    # Without the flag, the file's value stands.
    from_file = parse_config({"run": {"debugFromAnywhere": True}})
    assert settings_from(from_file, None, None).run.debug_from_anywhere is True
