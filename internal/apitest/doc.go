// Package apitest holds what the tests of the HTTP API and of the
// dashboard served on it share: an HTTP client that closes with the test,
// a request helper that returns the whole response, and a producer that
// writes counts to Redis as a wsnode does and waits until they are there.
package apitest
