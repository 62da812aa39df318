"""The protobuf schema jaxtune reads traces with: the parts of XSpace
(``xla/tsl/profiler/protobuf/xplane.proto``) and of the HLO proto (``xla/service/hlo.proto``)
the report needs, as message classes of the ``protobuf`` package (upb), built at import from a
``FileDescriptorProto`` written here, so no ``protoc`` and no generated code are needed.

Field numbers and wire types are XLA's; the differences are deliberate:

- Every ``string`` is declared ``bytes``: a damaged name in a trace is read with its bad
  UTF-8 replaced, never an error.
- Two *index* views keep a big trace cheap: :data:`SpaceIndex` holds each plane as
  undecoded bytes, :data:`PlaneIndex` each line. The reader decodes only the planes and lines
  the report reads (:mod:`.xplane`); the events of a line are decoded line by line.
- :data:`LineColumns` reads a line's events as one merged message, whose repeated fields are
  the columns of the events' offsets, durations and metadata ids (no object per event).
- Only the fields read are declared; the rest are skipped by upb as unknown fields.

Messages (numbers as XLA's)::

    XSpace         planes=1 errors=2 warnings=3 hostnames=4
    XPlane         id=1 name=2 lines=3 event_metadata=4 (map) stat_metadata=5 (map) stats=6
    XLine          id=1 name=2 timestamp_ns=3 events=4 duration_ps=9 display_id=10
                   display_name=11
    XEvent         metadata_id=1 offset_ps=2 duration_ps=3 stats=4 num_occurrences=5
    XStat          metadata_id=1 double=2 uint64=3 int64=4 str=5 bytes=6 ref=7
    XEventMetadata id=1 name=2 metadata=3 display_name=4 stats=5 child_id=6
    XStatMetadata  id=1 name=2 description=3

    HloProto             hlo_module=1
    HloModuleProto       name=1 computations=3 id=5 stack_frame_index=17
    HloComputationProto  name=1 instructions=2 id=5
    HloInstructionProto  name=1 opcode=2 metadata=7 custom_call_target=28 id=35
                         operand_ids=36 called_computation_ids=38 backend_config=43
    OpMetadata           op_type=1 op_name=2 source_file=3 source_line=4 stack_frame_id=15
    StackFrameIndexProto file_names=1 function_names=2 file_locations=3 stack_frames=4
    FileLocation         file_name_id=1 function_name_id=2 line=3
    StackFrame           file_location_id=1 parent_frame_id=2

    LloModuleProto       hlo_instruction_name=1 bundle_slots=6 hlo_module_id=11
    LloBundleSlots       mxu=1 xlu=2 vector_alu=3 vector_eup=4 vector_load=5
                         vector_store=6 scalar_alu=7 spill=8 fill=9
    LloUnitSlots         used=1 avail=2

The LLO module (the ``llo_proto`` stat that ``--xla_xprof_register_llo_debug_info`` puts on
``/host:metadata``) has no published schema: xprof reads it with one compiled into its
extension. The fields above were read off the v5e fixtures (libtpu 0.0.42.1) and match, bundle
for bundle and unit for unit, what xprof 2.24.2's ``bundle_util`` analysis answers for every
LLO module there; the names are xprof's JSON keys (``mxu_used``, ``mxu_avail``, ...). Field 6
holds, per unit, one count of filled slots per bundle (packed) and the slots a bundle has;
8 and 9 one spill and one fill flag per bundle. :mod:`jaxtune._profiling.llo_bundles`
checks what it reads before it uses it.

``XStat`` has no ``compressed_str_value``: XLA's ``xplane.proto`` (``xla/tsl/profiler/
protobuf/xplane.proto``, and the descriptors compiled into jaxlib 0.10.2 and 0.12 and xprof
2.24.2) defines fields 1-7 only. A field a newer writer adds is skipped as unknown.

Parsing runs no code of the input's choosing: these are plain data messages, with no
extensions, no ``Any`` and no recursion (upb bounds the nesting of unknown groups).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = [
    "EventLite",
    "HloProto",
    "Line",
    "LineColumns",
    "LineEvents",
    "LineHead",
    "LineLite",
    "LloModule",
    "PlaneIndex",
    "SpaceIndex",
]

_F = descriptor_pb2.FieldDescriptorProto
_INT64, _UINT64, _INT32, _DOUBLE = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_INT32, _F.TYPE_DOUBLE
_UINT32 = _F.TYPE_UINT32
_BYTES, _MESSAGE = _F.TYPE_BYTES, _F.TYPE_MESSAGE
_OPTIONAL, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

_PACKAGE = "jaxtune.trace"

#: name -> fields ``(name, number, type, repeated, message type, oneof index)``, and oneofs.
_Field = tuple[str, int, int, bool, str | None, int | None]
_MESSAGES: dict[str, tuple[list[_Field], list[str]]] = {
    "XStat": (
        [
            ("metadata_id", 1, _INT64, False, None, None),
            ("double_value", 2, _DOUBLE, False, None, 0),
            ("uint64_value", 3, _UINT64, False, None, 0),
            ("int64_value", 4, _INT64, False, None, 0),
            ("str_value", 5, _BYTES, False, None, 0),
            ("bytes_value", 6, _BYTES, False, None, 0),
            ("ref_value", 7, _UINT64, False, None, 0),
        ],
        ["value"],
    ),
    "XEvent": (
        [
            ("metadata_id", 1, _INT64, False, None, None),
            ("offset_ps", 2, _INT64, False, None, 0),
            ("num_occurrences", 5, _INT64, False, None, 0),
            ("duration_ps", 3, _INT64, False, None, None),
            ("stats", 4, _MESSAGE, True, "XStat", None),
        ],
        ["data"],
    ),
    "XLine": (
        [
            ("id", 1, _INT64, False, None, None),
            ("name", 2, _BYTES, False, None, None),
            ("timestamp_ns", 3, _INT64, False, None, None),
            ("events", 4, _MESSAGE, True, "XEvent", None),
            ("duration_ps", 9, _INT64, False, None, None),
            ("display_name", 11, _BYTES, False, None, None),
        ],
        [],
    ),
    # An event without its stats, and a line of them (a TPU's op line: an op's facts are
    # on its metadata).
    "XEventLite": (
        [
            ("metadata_id", 1, _INT64, False, None, None),
            ("offset_ps", 2, _INT64, False, None, 0),
            ("num_occurrences", 5, _INT64, False, None, 0),
            ("duration_ps", 3, _INT64, False, None, None),
        ],
        ["data"],
    ),
    "XLineLite": ([("events", 4, _MESSAGE, True, "XEventLite", None)], []),
    # A line's events as one message: a singular message field met many times is their
    # merge, whose repeated fields hold each event's value in turn. Its columns come out
    # of the parse whole, with no object per event (exact when every event holds each
    # field once; :func:`.xplane.event_columns` checks).
    "XEventColumns": (
        [
            ("metadata_id", 1, _INT64, True, None, None),
            ("offset_ps", 2, _INT64, True, None, None),
            ("duration_ps", 3, _INT64, True, None, None),
            ("num_occurrences", 5, _INT64, True, None, None),
        ],
        [],
    ),
    "XLineColumns": ([("events", 4, _MESSAGE, False, "XEventColumns", None)], []),
    # A line's events, each left as bytes (to count them).
    "XLineEvents": ([("events", 4, _BYTES, True, None, None)], []),
    # A line without its events (field 4 left undeclared, so skipped).
    "XLineHead": (
        [
            ("id", 1, _INT64, False, None, None),
            ("name", 2, _BYTES, False, None, None),
            ("timestamp_ns", 3, _INT64, False, None, None),
            ("display_name", 11, _BYTES, False, None, None),
        ],
        [],
    ),
    "XEventMetadata": (
        [
            ("id", 1, _INT64, False, None, None),
            ("name", 2, _BYTES, False, None, None),
            ("display_name", 4, _BYTES, False, None, None),
            ("stats", 5, _MESSAGE, True, "XStat", None),
        ],
        [],
    ),
    "XStatMetadata": (
        [("id", 1, _INT64, False, None, None), ("name", 2, _BYTES, False, None, None)],
        [],
    ),
    # A plane with its lines left as bytes.
    "XPlaneIndex": (
        [
            ("id", 1, _INT64, False, None, None),
            ("name", 2, _BYTES, False, None, None),
            ("lines", 3, _BYTES, True, None, None),
            ("event_metadata", 4, _MESSAGE, True, "XPlaneIndex.EventMetadataEntry", None),
            ("stat_metadata", 5, _MESSAGE, True, "XPlaneIndex.StatMetadataEntry", None),
            ("stats", 6, _MESSAGE, True, "XStat", None),
        ],
        [],
    ),
    # A space with its planes left as bytes.
    "XSpaceIndex": (
        [
            ("planes", 1, _BYTES, True, None, None),
            ("errors", 2, _BYTES, True, None, None),
            ("warnings", 3, _BYTES, True, None, None),
            ("hostnames", 4, _BYTES, True, None, None),
        ],
        [],
    ),
    # A plane's name alone (to pick the planes worth decoding).
    "XPlaneName": (
        [("id", 1, _INT64, False, None, None), ("name", 2, _BYTES, False, None, None)],
        [],
    ),
    "FileLocation": (
        [
            ("file_name_id", 1, _INT32, False, None, None),
            ("function_name_id", 2, _INT32, False, None, None),
            ("line", 3, _INT32, False, None, None),
        ],
        [],
    ),
    "StackFrame": (
        [
            ("file_location_id", 1, _INT32, False, None, None),
            ("parent_frame_id", 2, _INT32, False, None, None),
        ],
        [],
    ),
    "StackFrameIndexProto": (
        [
            ("file_names", 1, _BYTES, True, None, None),
            ("function_names", 2, _BYTES, True, None, None),
            ("file_locations", 3, _MESSAGE, True, "FileLocation", None),
            ("stack_frames", 4, _MESSAGE, True, "StackFrame", None),
        ],
        [],
    ),
    "OpMetadata": (
        [
            ("op_type", 1, _BYTES, False, None, None),
            ("op_name", 2, _BYTES, False, None, None),
            ("source_file", 3, _BYTES, False, None, None),
            ("source_line", 4, _INT32, False, None, None),
            ("stack_frame_id", 15, _INT32, False, None, None),
        ],
        [],
    ),
    "HloInstructionProto": (
        [
            ("name", 1, _BYTES, False, None, None),
            ("opcode", 2, _BYTES, False, None, None),
            ("metadata", 7, _MESSAGE, False, "OpMetadata", None),
            ("custom_call_target", 28, _BYTES, False, None, None),
            ("id", 35, _INT64, False, None, None),
            ("operand_ids", 36, _INT64, True, None, None),
            ("called_computation_ids", 38, _INT64, True, None, None),
            ("backend_config", 43, _BYTES, False, None, None),
        ],
        [],
    ),
    "HloComputationProto": (
        [
            ("name", 1, _BYTES, False, None, None),
            ("instructions", 2, _MESSAGE, True, "HloInstructionProto", None),
            ("id", 5, _INT64, False, None, None),
        ],
        [],
    ),
    "HloModuleProto": (
        [
            ("name", 1, _BYTES, False, None, None),
            ("computations", 3, _MESSAGE, True, "HloComputationProto", None),
            ("id", 5, _INT64, False, None, None),
            ("stack_frame_index", 17, _MESSAGE, False, "StackFrameIndexProto", None),
        ],
        [],
    ),
    "HloProto": ([("hlo_module", 1, _MESSAGE, False, "HloModuleProto", None)], []),
    # One unit's issue slots in each bundle of an LLO module: filled (one count per bundle)
    # and available per bundle.
    "LloUnitSlots": (
        [("used", 1, _UINT32, True, None, None), ("avail", 2, _UINT32, False, None, None)],
        [],
    ),
    "LloBundleSlots": (
        [
            ("mxu", 1, _MESSAGE, False, "LloUnitSlots", None),
            ("xlu", 2, _MESSAGE, False, "LloUnitSlots", None),
            ("vector_alu", 3, _MESSAGE, False, "LloUnitSlots", None),
            ("vector_eup", 4, _MESSAGE, False, "LloUnitSlots", None),
            ("vector_load", 5, _MESSAGE, False, "LloUnitSlots", None),
            ("vector_store", 6, _MESSAGE, False, "LloUnitSlots", None),
            ("scalar_alu", 7, _MESSAGE, False, "LloUnitSlots", None),
            ("spill", 8, _UINT32, True, None, None),
            ("fill", 9, _UINT32, True, None, None),
        ],
        [],
    ),
    "LloModuleProto": (
        [
            ("hlo_instruction_name", 1, _BYTES, False, None, None),
            ("bundle_slots", 6, _MESSAGE, False, "LloBundleSlots", None),
            ("hlo_module_id", 11, _INT64, False, None, None),
        ],
        [],
    ),
}

#: Map entries of XPlaneIndex: key -> value message.
_MAP_ENTRIES = {
    "XPlaneIndex": [
        ("EventMetadataEntry", "XEventMetadata"),
        ("StatMetadataEntry", "XStatMetadata"),
    ]
}


def _add_field(message: Any, spec: _Field) -> None:
    name, number, kind, repeated, type_name, oneof = spec
    field = message.field.add(
        name=name, number=number, type=kind, label=_REPEATED if repeated else _OPTIONAL
    )
    if type_name is not None:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        field.oneof_index = oneof


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(
        name="jaxtune/trace.proto", package=_PACKAGE, syntax="proto3"
    )
    for name, (specs, oneofs) in _MESSAGES.items():
        message = fd.message_type.add(name=name)
        for oneof in oneofs:
            message.oneof_decl.add(name=oneof)
        for spec in specs:
            _add_field(message, spec)
        for entry, value in _MAP_ENTRIES.get(name, ()):
            nested = message.nested_type.add(name=entry)
            nested.options.map_entry = True
            _add_field(nested, ("key", 1, _INT64, False, None, None))
            _add_field(nested, ("value", 2, _MESSAGE, False, value, None))
    return fd


def _classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in _MESSAGES
    }


_CLASSES = _classes()

#: An XSpace whose planes are left as bytes.
SpaceIndex: Any = _CLASSES["XSpaceIndex"]
#: An XPlane's id and name alone.
PlaneName: Any = _CLASSES["XPlaneName"]
#: An XPlane whose lines are left as bytes: id, name, event and stat metadata, stats.
PlaneIndex: Any = _CLASSES["XPlaneIndex"]
#: An XLine without its events.
LineHead: Any = _CLASSES["XLineHead"]
#: An XLine with its events.
Line: Any = _CLASSES["XLine"]
#: An XLine's events without their stats.
LineLite: Any = _CLASSES["XLineLite"]
#: An XEvent without its stats.
EventLite: Any = _CLASSES["XEventLite"]
#: An XLine's events merged: ``events.metadata_id`` etc. each event's value in turn.
LineColumns: Any = _CLASSES["XLineColumns"]
#: An XLine's events, each as bytes.
LineEvents: Any = _CLASSES["XLineEvents"]
#: A serialized ``HloProto``: the module, its computations, instructions and stack frames.
HloProto: Any = _CLASSES["HloProto"]
#: The ``llo_proto`` stat of an LLO module (``/host:metadata``): its slot use per bundle.
LloModule: Any = _CLASSES["LloModuleProto"]
