# ruff: noqa
# mypy: disable-error-code="type-arg"
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListPodResourcesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPodResourcesResponse(_message.Message):
    __slots__ = ("pod_resources",)
    POD_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    pod_resources: _containers.RepeatedCompositeFieldContainer[PodResources]
    def __init__(
        self, pod_resources: _Optional[_Iterable[_Union[PodResources, _Mapping]]] = ...
    ) -> None: ...

class GetPodResourcesRequest(_message.Message):
    __slots__ = ("pod_name", "pod_namespace")
    POD_NAME_FIELD_NUMBER: _ClassVar[int]
    POD_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    pod_name: str
    pod_namespace: str
    def __init__(
        self, pod_name: _Optional[str] = ..., pod_namespace: _Optional[str] = ...
    ) -> None: ...

class GetPodResourcesResponse(_message.Message):
    __slots__ = ("pod_resources",)
    POD_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    pod_resources: PodResources
    def __init__(self, pod_resources: _Optional[_Union[PodResources, _Mapping]] = ...) -> None: ...

class PodResources(_message.Message):
    __slots__ = ("name", "namespace", "containers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    containers: _containers.RepeatedCompositeFieldContainer[ContainerResources]
    def __init__(
        self,
        name: _Optional[str] = ...,
        namespace: _Optional[str] = ...,
        containers: _Optional[_Iterable[_Union[ContainerResources, _Mapping]]] = ...,
    ) -> None: ...

class ContainerResources(_message.Message):
    __slots__ = ("name", "devices")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    name: str
    devices: _containers.RepeatedCompositeFieldContainer[ContainerDevices]
    def __init__(
        self,
        name: _Optional[str] = ...,
        devices: _Optional[_Iterable[_Union[ContainerDevices, _Mapping]]] = ...,
    ) -> None: ...

class ContainerDevices(_message.Message):
    __slots__ = ("resource_name", "device_ids")
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    resource_name: str
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(
        self, resource_name: _Optional[str] = ..., device_ids: _Optional[_Iterable[str]] = ...
    ) -> None: ...
