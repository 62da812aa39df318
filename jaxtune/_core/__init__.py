"""The core both flows stand on: settings, errors, the codec, files and locks, flags,
toolchain versions, the entry schema. It imports nothing else of jaxtune."""
