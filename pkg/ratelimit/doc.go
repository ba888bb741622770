// Package ratelimit holds the apps' per-second budgets shared by every
// replica: events published through the HTTP API (maxBackendEventsPerSecond)
// and its read requests (maxReadRequestsPerSecond). A budget is a fixed
// one-second window in Redis, started by the first request after the last
// window ended (as soketi's limiter does), timed by Redis's clock so that
// replicas with skewed clocks share one window; each take is one
// single-slot script of constant cost under the app's hash tag. A refused
// take spends nothing.
//
// A fixed window lets a burst of up to twice the limit through across a
// window's end; a sliding window would smooth that at the cost of a sorted
// set per app and a script whose work grows with the limit. The budgets
// protect Redis and the nodes from a runaway publisher, which a fixed
// window does.
//
// When Redis cannot answer, Take lets the request through (fail open),
// logs a warning at most once a minute and counts the error: the request's
// own Redis work meets the same outage and answers 503 by itself, and a
// limiter failing alone must not take the API down.
//
// The package also counts the client events wsnode refuses per socket
// (Metrics), so one metric shows every rejection by app and kind. A
// Limiter is safe for concurrent use.
package ratelimit
