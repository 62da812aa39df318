"""The core both flows stand on: settings, errors, the codec, files and locks, flags,
toolchain versions, the entry schema, the devices' peaks (:mod:`.roofline`), the trace reader
(:mod:`.xspace`). It imports
nothing else of jaxtune."""
