// Package protocol is the Pusher Channels wire protocol v7 without I/O: the
// event envelope and its codec, error and close codes, socket ids, and the
// rules for channel names.
//
// Client frames are decoded with Decode, which accepts data either as a JSON
// value (pusher-js sends objects) or as a JSON-encoded string (other clients).
// Server frames are built with the Append functions, which always send data
// as a JSON-encoded string, as Pusher does and as every SDK but pusher-js
// requires. The Append functions write into a caller's buffer so the hot
// path can reuse one; Pong is pre-encoded.
//
// Presence channel_data and signin user_data are parsed with
// ParseChannelData and ParseUserData; the raw strings stay what is signed.
// A numeric user_id is normalized to its exact value in plain decimal, so
// 10, 1e1, 10.0 and "10" are the same member.
//
// Everything here is safe for concurrent use; all but NewSocketID, which
// reads crypto/rand, is pure.
// Pre-encoded frames such as Pong are shared and must not be modified.
package protocol
