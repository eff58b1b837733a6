// CheckWireUtf8: finds invalid UTF-8 in the `string` fields of a serialized
// protobuf message before it is parsed. protobuf's own parser rejects such
// a message with no word of which field (gRPC then answers UNIMPLEMENTED
// with an empty message) and logs an ERROR line per message; a server that
// checks the wire bytes first can answer INVALID_ARGUMENT naming the field
// and log nothing. Pure function; thread-safe.
#ifndef LOOKAHEAD_COMMON_WIRE_VALIDATION_H_
#define LOOKAHEAD_COMMON_WIRE_VALIDATION_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

namespace lookahead {

// Walks `wire`, a serialized `descriptor` message, and every message field
// in it (repeated, map and oneof fields included, up to 100 levels deep).
// Returns OK iff every length-delimited field declared `string` is valid
// UTF-8 (common/utf8.h) and the framing is sound; else INVALID_ARGUMENT
// naming the field by its path, e.g. "chat.messages[2].role is not valid
// UTF-8 (byte 4 of 9 starts no character)". Fields the descriptor does not
// know, and fields whose wire type differs from their declaration, are
// skipped as the parser skips them. The message quotes no client bytes.
absl::Status CheckWireUtf8(absl::string_view wire,
                           const google::protobuf::Descriptor& descriptor);

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_WIRE_VALIDATION_H_
