"""The wire types today's `comfy_api.latest.io` has beyond compat/v3/io.py's (ComfyUI's
comfy_api/latest/_io.py @04e2a914, Comfy-Org/ComfyUI, read for the names and the `/object_info`
options each renders; written here): packs declare `io.BoundingBox.Input(...)`,
`io.Tracks.Output()`, `io.Color.Input(...)` and expect ComfyUI's entries.

* Plain wire types (a socket, no widget): `Tracks`, `Dict`, `Array`, `Splat`, the `File3D*`
  family, `Load3D*`, `Layers`, `Histogram`, `BackgroundRemoval`.
* Widgets the editor draws itself (ComfyUI's "socketless" widgets: no input socket unless
  `socketless=False` or `force_input=True`): `BoundingBox`, `BoundingBoxes`, `Color`, `Colors`,
  `Curve`, `Range`, `VideoEdit`, `Compositor`, `CameraInfoState`, `ImageCompare`,
  `ResolutionPreview`. Each renders `[IO_TYPE, {"socketless": true, "default": ..., ...}]`
  with the type's default when the node gives none (a fresh copy for each input), e.g.
  `["BOUNDING_BOX", {"default": {"x": 0, "y": 0, "width": 512, "height": 512},
  "socketless": true, "forceInput": true}]`. Their values reach `execute` as the prompt gives
  them (dicts and lists; a list arrives wrapped as `{"__value__": [...]}`, unwrapped by the
  validator as in ComfyUI).
* `Webcam` (a string widget with a socket), `MultiCombo` (a combo of several choices:
  `"multiselect": true` and the editor's `"multi_select"` settings).
* `RemoteOptions`, `RemoteComboOptions` and `RemoteItemSchema`: where a combo's choices come from
  (`io.Combo.Input(..., remote=...)` / `remote_combo=...`), with ComfyUI's checks.

Not here: ComfyUI's internal `_DynamicGroup` (`COMFY_DYNAMICGROUP_V3`, marked unstable there).
The prompt validator (graph/validation.py) checks each item a MultiCombo's list value chose.
"""
from __future__ import annotations

from typing import Any, TypedDict

from compat.v3.io import Combo, ComfyType, SchemaError, WidgetInput, _plain, comfytype

__all__ = ["Array", "BackgroundRemoval", "BoundingBox", "BoundingBoxes", "CameraInfoState", "Color", "Colors",
           "Compositor", "Curve", "Dict", "File3DAny", "File3DFBX", "File3DGLB", "File3DGLTF", "File3DKSPLAT",
           "File3DOBJ", "File3DPLY", "File3DPointCloudAny", "File3DSPLAT", "File3DSPZ", "File3DSTL",
           "File3DSplatAny", "File3DUSDZ", "Histogram", "ImageCompare", "Layers", "Load3D", "Load3DAnimation",
           "Load3DCamera", "Load3DModelInfo", "MultiCombo", "Range", "RemoteComboOptions", "RemoteItemSchema",
           "RemoteOptions", "RemoteOptionsError", "ResolutionPreview", "Splat", "Tracks", "VideoEdit", "Webcam"]


def _pruned(**values: Any) -> dict:
    return {k: v for k, v in values.items() if v is not None}


# -- plain wire types -----------------------------------------------------------------------------
BackgroundRemoval = _plain("BackgroundRemoval", "BACKGROUND_REMOVAL")
Splat = _plain("Splat", "SPLAT")
File3DAny = _plain("File3DAny", "FILE_3D")  # any 3D file; the others name one container
File3DGLB = _plain("File3DGLB", "FILE_3D_GLB")
File3DGLTF = _plain("File3DGLTF", "FILE_3D_GLTF")
File3DFBX = _plain("File3DFBX", "FILE_3D_FBX")
File3DOBJ = _plain("File3DOBJ", "FILE_3D_OBJ")
File3DSTL = _plain("File3DSTL", "FILE_3D_STL")
File3DUSDZ = _plain("File3DUSDZ", "FILE_3D_USDZ")
File3DPLY = _plain("File3DPLY", "FILE_3D_PLY")
File3DSPLAT = _plain("File3DSPLAT", "FILE_3D_SPLAT")
File3DSPZ = _plain("File3DSPZ", "FILE_3D_SPZ")
File3DKSPLAT = _plain("File3DKSPLAT", "FILE_3D_KSPLAT")
File3DSplatAny = _plain("File3DSplatAny", "FILE_3D_SPLAT_ANY")
File3DPointCloudAny = _plain("File3DPointCloudAny", "FILE_3D_POINT_CLOUD_ANY")
Layers = _plain("Layers", "LAYERS")
Dict = _plain("Dict", "DICT")
Array = _plain("Array", "ARRAY")
Histogram = _plain("Histogram", "HISTOGRAM")  # a list of bin counts
Dict.Type, Array.Type, Histogram.Type = dict, list, list


@comfytype("TRACKS")
class Tracks(ComfyType):
    """Point tracks (WanMove): `{"track_path": tensor, "track_visibility": tensor}`."""

    class TrackDict(TypedDict):
        track_path: Any  # torch.Tensor
        track_visibility: Any  # torch.Tensor

    Type = TrackDict


@comfytype("LOAD3D_CAMERA")
class Load3DCamera(ComfyType):
    """The 3D viewer's camera (right-handed, Y up, looking down -Z)."""

    class CameraInfo(TypedDict):
        position: dict
        target: dict
        zoom: float
        cameraType: str  # noqa: N815 -- the editor's key

    Type = CameraInfo


@comfytype("LOAD3D_MODEL_INFO")
class Load3DModelInfo(ComfyType):
    """Each model's world transform (position, quaternion, scale)."""

    class Model3DTransform(TypedDict):
        position: dict
        quaternion: dict
        scale: dict

    Type = list


@comfytype("LOAD_3D")
class Load3D(ComfyType):
    """What the 3D viewer widget sends: rendered image, mask and normal file names and the camera."""

    class Model3DDict(TypedDict):
        image: str
        mask: str
        normal: str
        camera_info: dict  # a Load3DCamera.CameraInfo

    Type = Model3DDict


@comfytype("LOAD_3D_ANIMATION")
class Load3DAnimation(Load3D):
    pass


# -- widgets --------------------------------------------------------------------------------------
@comfytype("WEBCAM")
class Webcam(ComfyType):
    Type = str

    class Input(WidgetInput):
        """A webcam capture widget (its value: the captured image's file name)."""


@comfytype("COMBO")
class MultiCombo(ComfyType):
    """A combo of several choices: the value is a list of options."""

    Type = list

    class Input(Combo.Input):
        def __init__(self, id: str, options: Any, display_name: str | None = None, optional: bool = False,  # noqa: A002
                     tooltip: str | None = None, lazy: bool | None = None, default: list | None = None,
                     placeholder: str | None = None, chip: bool | None = None,
                     control_after_generate: Any = None, **kw: Any) -> None:
            super().__init__(id, options, display_name, optional, tooltip, lazy, default, control_after_generate,
                             multiselect=True, multi_select=_pruned(placeholder=placeholder, chip=chip), **kw)


class _EditorWidget(WidgetInput):
    """A widget the editor draws itself (V3's socketless widgets): `default_value()` is the
    type's default (a fresh object per input) when the node gives none."""

    def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                 tooltip: str | None = None, socketless: bool | None = True, default: Any = None,
                 advanced: bool | None = None, **kw: Any) -> None:
        if default is None:
            default = self.default_value()
        super().__init__(id, display_name, optional, tooltip, None, default, socketless, advanced=advanced, **kw)

    def default_value(self) -> Any:
        return None


@comfytype("BOUNDING_BOX")
class BoundingBox(ComfyType):
    """One pixel box `{x, y, width, height}`; as an input, the editor's box widget (`component`
    names the editor component that draws it, e.g. "ImageCrop"), or a socket with `force_input`."""

    class BoundingBoxDict(TypedDict):
        x: int
        y: int
        width: int
        height: int

    Type = BoundingBoxDict

    class Input(_EditorWidget):
        def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                     tooltip: str | None = None, socketless: bool | None = True, default: dict | None = None,
                     component: str | None = None, force_input: bool | None = None, **kw: Any) -> None:
            super().__init__(id, display_name, optional, tooltip, socketless, default, force_input=force_input,
                             component=component or None, **kw)

        def default_value(self) -> dict:
            return {"x": 0, "y": 0, "width": 512, "height": 512}


@comfytype("BOUNDING_BOXES")
class BoundingBoxes(ComfyType):
    """A list of boxes, each `{x, y, width, height, metadata}`."""

    Type = list

    class Input(_EditorWidget):
        def default_value(self) -> list:
            return []


@comfytype("COLOR")
class Color(ComfyType):
    """A colour as a "#rrggbb" string."""

    Type = str

    class Input(_EditorWidget):
        def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                     tooltip: str | None = None, socketless: bool | None = True, advanced: bool | None = None,
                     default: str = "#ffffff", **kw: Any) -> None:
            super().__init__(id, display_name, optional, tooltip, socketless, default, advanced, **kw)


@comfytype("COLORS")
class Colors(ComfyType):
    Type = list

    class Input(_EditorWidget):
        def default_value(self) -> list:
            return []


@comfytype("CURVE")
class Curve(ComfyType):
    """A curve through control points in 0..1; the editor's widget takes `{"points": [[x, y], ...],
    "interpolation": "monotone_cubic"}` as its default (ComfyUI renders the points so)."""

    class Input(_EditorWidget):
        def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                     tooltip: str | None = None, socketless: bool | None = True, default: list | None = None,
                     advanced: bool | None = None, **kw: Any) -> None:
            points = default if default is not None else [(0.0, 0.0), (1.0, 1.0)]
            self.points = [tuple(p) for p in points]
            rendered = {"points": [list(p) for p in points], "interpolation": "monotone_cubic"}
            super().__init__(id, display_name, optional, tooltip, socketless, rendered, advanced, **kw)


@comfytype("RANGE")
class Range(ComfyType):
    """A `{"min", "max"}` pair drawn as a range slider."""

    class Input(_EditorWidget):
        def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                     tooltip: str | None = None, socketless: bool | None = True, default: dict | None = None,
                     display: str | None = None, gradient_stops: list | None = None,
                     show_midpoint: bool | None = None, midpoint_scale: str | None = None,
                     value_min: float | None = None, value_max: float | None = None,
                     advanced: bool | None = None, **kw: Any) -> None:
            super().__init__(id, display_name, optional, tooltip, socketless, default, advanced, display=display,
                             gradient_stops=gradient_stops, show_midpoint=show_midpoint,
                             midpoint_scale=midpoint_scale, value_min=value_min, value_max=value_max, **kw)

        def default_value(self) -> dict:
            return {"min": 0.0, "max": 1.0}


@comfytype("VIDEO_EDIT")
class VideoEdit(ComfyType):
    """A trim / crop edit of a video: `{"trim": {start_time, duration}, "crop": {x, y, width, height}}`
    (the sections named in `features`)."""

    class Input(_EditorWidget):
        def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                     tooltip: str | None = None, socketless: bool | None = True, default: dict | None = None,
                     features: list | None = None, advanced: bool | None = None, **kw: Any) -> None:
            self.features = list(features) if features is not None else ["trim", "crop"]
            super().__init__(id, display_name, optional, tooltip, socketless, default, advanced,
                             features=self.features, **kw)

        def default_value(self) -> dict:
            sections = {"trim": {"start_time": 0.0, "duration": 0.0}, "crop": {"x": 0, "y": 0, "width": 0, "height": 0}}
            return {name: value for name, value in sections.items() if name in self.features}


@comfytype("COMPOSITOR")
class Compositor(ComfyType):
    """The layer compositor's state (canvas, layers, order)."""

    Type = dict

    class Input(_EditorWidget):
        def default_value(self) -> dict:
            return {}


class _StateWidget(_EditorWidget):
    """An editor widget with no default (the editor fills its state)."""

    def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                 tooltip: str | None = None, socketless: bool | None = True, advanced: bool | None = None,
                 **kw: Any) -> None:
        super().__init__(id, display_name, optional, tooltip, socketless, None, advanced, **kw)


@comfytype("CAMERA_INFO_STATE")
class CameraInfoState(ComfyType):
    Type = dict

    class Input(_StateWidget):
        pass


@comfytype("IMAGECOMPARE")
class ImageCompare(ComfyType):
    """The before/after image comparison view (filled by the node's UI output)."""

    Type = dict

    class Input(_StateWidget):
        pass


@comfytype("RESOLUTION_PREVIEW")
class ResolutionPreview(ComfyType):
    """A preview of the resolution the node's aspect-ratio / megapixel / multiple widgets give
    (it names those widgets); optional by default, as in ComfyUI."""

    Type = dict

    class Input(_EditorWidget):
        def __init__(self, id: str, display_name: str | None = None, optional: bool = True,  # noqa: A002
                     tooltip: str | None = None, socketless: bool | None = True, advanced: bool | None = None,
                     ratio_widget: str | None = "aspect_ratio", megapixels_widget: str | None = "megapixels",
                     multiple_widget: str | None = "multiple", **kw: Any) -> None:
            super().__init__(id, display_name, optional, tooltip, socketless, None, advanced,
                             ratio_widget=ratio_widget, megapixels_widget=megapixels_widget,
                             multiple_widget=multiple_widget, **kw)


# -- where a combo's choices come from ------------------------------------------------------------
class RemoteOptionsError(SchemaError, ValueError):
    """Remote combo settings ComfyUI refuses (a ValueError there, a SchemaError here too)."""


_PREVIEW_TYPES = ("image", "video", "audio")


class RemoteItemSchema:
    """How the items a `RemoteComboOptions` route returns map onto dropdown entries: dot paths
    (`"labels.gender"`); `label_field` / `description_field` may be templates (`"{name} ({id})"`)."""

    def __init__(self, value_field: str, label_field: str, preview_url_field: str | None = None,
                 preview_type: str = "image", description_field: str | None = None,
                 search_fields: list | None = None) -> None:
        if preview_type not in _PREVIEW_TYPES:
            raise RemoteOptionsError(f"RemoteItemSchema: 'preview_type' must be one of {_PREVIEW_TYPES}, "
                                     f"got {preview_type!r}")
        for path in search_fields or ():
            if "{" in path or "}" in path:
                raise RemoteOptionsError(f"RemoteItemSchema: 'search_fields' must be dot paths, not templates "
                                         f"(got {path!r})")
        self.value_field, self.label_field = value_field, label_field
        self.preview_url_field, self.preview_type = preview_url_field, preview_type
        self.description_field, self.search_fields = description_field, search_fields

    def as_dict(self) -> dict:
        return _pruned(value_field=self.value_field, label_field=self.label_field,
                       preview_url_field=self.preview_url_field, preview_type=self.preview_type,
                       description_field=self.description_field, search_fields=self.search_fields)


class RemoteOptions:
    """A plain combo whose list of values the editor fetches from `route` (timeouts in ms)."""

    def __init__(self, route: str, refresh_button: bool, control_after_refresh: str = "first",
                 timeout: int | None = None, max_retries: int | None = None, refresh: int | None = None) -> None:
        self.route, self.refresh_button, self.control_after_refresh = route, refresh_button, control_after_refresh
        self.timeout, self.max_retries, self.refresh = timeout, max_retries, refresh

    def as_dict(self) -> dict:
        return _pruned(route=self.route, refresh_button=self.refresh_button,
                       control_after_refresh=self.control_after_refresh, timeout=self.timeout,
                       max_retries=self.max_retries, refresh=self.refresh)


class RemoteComboOptions:
    """A rich dropdown (previews, search) whose items the editor fetches from `route`, a path on
    the comfy.org API (must start with "/"); `item_schema` maps each item. The server cannot
    check such a value (ComfyUI skips it too)."""

    def __init__(self, route: str, item_schema: RemoteItemSchema, refresh_button: bool = True,
                 auto_select: str | None = None, timeout: int | None = None, max_retries: int | None = None,
                 refresh: int | None = None, response_key: str | None = None) -> None:
        problems = [
            (auto_select not in (None, "first", "last"), f"'auto_select' must be 'first', 'last' or None, "
                                                         f"got {auto_select!r}"),
            (refresh is not None and 0 < refresh < 128, f"'refresh' must be >= 128 (ms) or <= 0 (never "
                                                        f"expires), got {refresh}"),
            (timeout is not None and timeout < 0, f"'timeout' must be >= 0, got {timeout}"),
            (max_retries is not None and max_retries < 0, f"'max_retries' must be >= 0, got {max_retries}"),
            (not isinstance(route, str) or not route.startswith("/"), f"'route' must be a relative path starting "
                                                                      f"with '/', got {route!r}"),
        ]
        for failed, message in problems:
            if failed:
                raise RemoteOptionsError(f"RemoteComboOptions: {message}")
        self.route, self.item_schema, self.refresh_button = route, item_schema, refresh_button
        self.auto_select, self.timeout, self.max_retries = auto_select, timeout, max_retries
        self.refresh, self.response_key = refresh, response_key

    def as_dict(self) -> dict:
        return _pruned(route=self.route, item_schema=self.item_schema.as_dict(), refresh_button=self.refresh_button,
                       auto_select=self.auto_select, timeout=self.timeout, max_retries=self.max_retries,
                       refresh=self.refresh, response_key=self.response_key)
