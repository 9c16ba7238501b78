"""Typed gRPC bindings of the kubelet's device plugin and PodResources services.

grpcio-tools' ``_pb2_grpc`` modules are untyped, so instead of generating them we bind the few
methods by their wire paths (``/<package>.<Service>/<Method>``) with grpc's generic handlers.
Both sides live here: the plugin's server and the kubelet's client calls it makes
(Registration, PodResources), and the kubelet-side servers and plugin client that the test
kubelet (scheduler/testing/kubelet.py) uses. Behaviour is supplied by objects satisfying the
Protocols below; this module holds no logic.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final, Protocol

import grpc
import grpc.aio

from .protos import deviceplugin_pb2 as dp
from .protos import podresources_pb2 as pr

API_VERSION: Final = "v1beta1"
HEALTHY: Final = "Healthy"
UNHEALTHY: Final = "Unhealthy"

REGISTRATION_SERVICE: Final = "v1beta1.Registration"
DEVICE_PLUGIN_SERVICE: Final = "v1beta1.DevicePlugin"
POD_RESOURCES_SERVICE: Final = "v1.PodResourcesLister"

Context = grpc.aio.ServicerContext[Any, Any]


def unix_target(path: str) -> str:
    """The gRPC address of a unix socket path."""
    return f"unix:{path}"


# ---- the plugin's side ---------------------------------------------------------------------


class DevicePluginService(Protocol):
    async def get_device_plugin_options(
        self, request: dp.Empty, context: Context
    ) -> dp.DevicePluginOptions: ...

    def list_and_watch(
        self, request: dp.Empty, context: Context
    ) -> AsyncIterator[dp.ListAndWatchResponse]: ...

    async def get_preferred_allocation(
        self, request: dp.PreferredAllocationRequest, context: Context
    ) -> dp.PreferredAllocationResponse: ...

    async def allocate(
        self, request: dp.AllocateRequest, context: Context
    ) -> dp.AllocateResponse: ...

    async def pre_start_container(
        self, request: dp.PreStartContainerRequest, context: Context
    ) -> dp.PreStartContainerResponse: ...


def device_plugin_handler(service: DevicePluginService) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        DEVICE_PLUGIN_SERVICE,
        {
            "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(
                service.get_device_plugin_options,
                request_deserializer=dp.Empty.FromString,
                response_serializer=dp.DevicePluginOptions.SerializeToString,
            ),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                service.list_and_watch,
                request_deserializer=dp.Empty.FromString,
                response_serializer=dp.ListAndWatchResponse.SerializeToString,
            ),
            "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(
                service.get_preferred_allocation,
                request_deserializer=dp.PreferredAllocationRequest.FromString,
                response_serializer=dp.PreferredAllocationResponse.SerializeToString,
            ),
            "Allocate": grpc.unary_unary_rpc_method_handler(
                service.allocate,
                request_deserializer=dp.AllocateRequest.FromString,
                response_serializer=dp.AllocateResponse.SerializeToString,
            ),
            "PreStartContainer": grpc.unary_unary_rpc_method_handler(
                service.pre_start_container,
                request_deserializer=dp.PreStartContainerRequest.FromString,
                response_serializer=dp.PreStartContainerResponse.SerializeToString,
            ),
        },
    )


class RegistrationClient:
    """The plugin's call to the kubelet's Registration service."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.register = channel.unary_unary(
            f"/{REGISTRATION_SERVICE}/Register",
            request_serializer=dp.RegisterRequest.SerializeToString,
            response_deserializer=dp.Empty.FromString,
        )


class PodResourcesClient:
    """The plugin's calls to the kubelet's PodResources service."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.list = channel.unary_unary(
            f"/{POD_RESOURCES_SERVICE}/List",
            request_serializer=pr.ListPodResourcesRequest.SerializeToString,
            response_deserializer=pr.ListPodResourcesResponse.FromString,
        )
        self.get = channel.unary_unary(
            f"/{POD_RESOURCES_SERVICE}/Get",
            request_serializer=pr.GetPodResourcesRequest.SerializeToString,
            response_deserializer=pr.GetPodResourcesResponse.FromString,
        )


# ---- the kubelet's side (used by the test kubelet) -------------------------------------------


class RegistrationService(Protocol):
    async def register(self, request: dp.RegisterRequest, context: Context) -> dp.Empty: ...


class PodResourcesService(Protocol):
    async def list(
        self, request: pr.ListPodResourcesRequest, context: Context
    ) -> pr.ListPodResourcesResponse: ...

    async def get(
        self, request: pr.GetPodResourcesRequest, context: Context
    ) -> pr.GetPodResourcesResponse: ...


def registration_handler(service: RegistrationService) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        REGISTRATION_SERVICE,
        {
            "Register": grpc.unary_unary_rpc_method_handler(
                service.register,
                request_deserializer=dp.RegisterRequest.FromString,
                response_serializer=dp.Empty.SerializeToString,
            )
        },
    )


def pod_resources_handler(service: PodResourcesService) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        POD_RESOURCES_SERVICE,
        {
            "List": grpc.unary_unary_rpc_method_handler(
                service.list,
                request_deserializer=pr.ListPodResourcesRequest.FromString,
                response_serializer=pr.ListPodResourcesResponse.SerializeToString,
            ),
            "Get": grpc.unary_unary_rpc_method_handler(
                service.get,
                request_deserializer=pr.GetPodResourcesRequest.FromString,
                response_serializer=pr.GetPodResourcesResponse.SerializeToString,
            ),
        },
    )


class DevicePluginClient:
    """The kubelet's calls to a device plugin."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        base = f"/{DEVICE_PLUGIN_SERVICE}"
        self.get_device_plugin_options = channel.unary_unary(
            f"{base}/GetDevicePluginOptions",
            request_serializer=dp.Empty.SerializeToString,
            response_deserializer=dp.DevicePluginOptions.FromString,
        )
        self.list_and_watch = channel.unary_stream(
            f"{base}/ListAndWatch",
            request_serializer=dp.Empty.SerializeToString,
            response_deserializer=dp.ListAndWatchResponse.FromString,
        )
        self.get_preferred_allocation = channel.unary_unary(
            f"{base}/GetPreferredAllocation",
            request_serializer=dp.PreferredAllocationRequest.SerializeToString,
            response_deserializer=dp.PreferredAllocationResponse.FromString,
        )
        self.allocate = channel.unary_unary(
            f"{base}/Allocate",
            request_serializer=dp.AllocateRequest.SerializeToString,
            response_deserializer=dp.AllocateResponse.FromString,
        )
        self.pre_start_container = channel.unary_unary(
            f"{base}/PreStartContainer",
            request_serializer=dp.PreStartContainerRequest.SerializeToString,
            response_deserializer=dp.PreStartContainerResponse.FromString,
        )
