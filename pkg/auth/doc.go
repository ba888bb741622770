// Package auth checks Pusher signatures: the signed HTTP API requests
// (auth_key, auth_timestamp, auth_version, body_md5, auth_signature) and the
// channel and signin auth values a socket presents ("<app key>:<hex>").
//
// It guarantees that a request or auth value passes only if it was signed
// with the app's secret over exactly what the server is about to act on:
// the method, the path, every query parameter and, through body_md5, the
// body. Because Pusher's string to sign joins parameters with '&' and '='
// without escaping them, a query is refused (401, "signature ambiguous")
// when a decoded key holds '&' or '=', a decoded value holds '&', or a key
// appears twice: no two accepted queries sign the same string (see
// FuzzSignedQuery). Signatures are compared in constant time. Every failure is an *Error
// whose message says exactly why, in Pusher's wording where Pusher has one;
// messages may echo the string to sign (it holds no secret) and the given
// signature, but never the secret.
//
// body_md5 is a signed parameter, so VerifyQuery checks a request before
// its body is read and SignedQuery.CheckBody checks the body afterwards:
// a server need read a body only for a caller who holds the secret.
//
// The package does no I/O, keeps no state and is safe for concurrent use.
// Its parsers never panic, whatever the input (see FuzzVerify).
package auth
