from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ReloadRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    def __init__(self, version: _Optional[str] = ...) -> None: ...

class ReloadResponse(_message.Message):
    __slots__ = ("previous_version", "bundle_version", "bundle_name", "rows", "load_seconds")
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_NAME_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    LOAD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    previous_version: int
    bundle_version: int
    bundle_name: str
    rows: int
    load_seconds: float
    def __init__(self, previous_version: _Optional[int] = ..., bundle_version: _Optional[int] = ..., bundle_name: _Optional[str] = ..., rows: _Optional[int] = ..., load_seconds: _Optional[float] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ("serving",)
    SERVING_FIELD_NUMBER: _ClassVar[int]
    serving: bool
    def __init__(self, serving: _Optional[bool] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("serving", "draining", "bundle_version", "bundle_name", "bundle_path", "bundles_dir", "rows", "encoder", "queue_depth", "uptime_seconds", "hot_swaps")
    SERVING_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_NAME_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_PATH_FIELD_NUMBER: _ClassVar[int]
    BUNDLES_DIR_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    ENCODER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HOT_SWAPS_FIELD_NUMBER: _ClassVar[int]
    serving: bool
    draining: bool
    bundle_version: int
    bundle_name: str
    bundle_path: str
    bundles_dir: str
    rows: int
    encoder: str
    queue_depth: int
    uptime_seconds: float
    hot_swaps: int
    def __init__(self, serving: _Optional[bool] = ..., draining: _Optional[bool] = ..., bundle_version: _Optional[int] = ..., bundle_name: _Optional[str] = ..., bundle_path: _Optional[str] = ..., bundles_dir: _Optional[str] = ..., rows: _Optional[int] = ..., encoder: _Optional[str] = ..., queue_depth: _Optional[int] = ..., uptime_seconds: _Optional[float] = ..., hot_swaps: _Optional[int] = ...) -> None: ...
