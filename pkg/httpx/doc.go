// Package httpx holds how the signed HTTP API (httpapi) and the dashboard
// served on it (dashboard) answer, so that both answer alike:
//
//   - a JSON body (WriteJSON, or WriteJSONBody for one already encoded)
//     with a trailing newline, never cached, since counts change every
//     moment;
//   - a refusal (Refuse) in plain text, as Pusher answers, which the
//     clients show as-is, logged at debug only, so a flood of bad requests
//     cannot flood the logs.
//
// Its functions are safe for concurrent use.
package httpx
