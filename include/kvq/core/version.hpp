// kvq/core/version.hpp - library version and the cold-record format version (docs/FORMAT.md).
#pragma once

#define KVQ_VERSION_MAJOR 0
#define KVQ_VERSION_MINOR 1
#define KVQ_VERSION_PATCH 0

// Bumped whenever the bytes of a cold record change meaning. Engines that ship records between
// machines compare it (docs/FORMAT.md, "Versioning").
#define KVQ_FORMAT_VERSION 1
