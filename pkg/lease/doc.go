// Package lease is a token-fenced lease in Redis and an Elector that runs
// work only while it holds the lease. Acquire is SET NX PX with a random
// token; renew and release succeed only while the key still holds that token
// (a Lua compare), so a holder that paused past its TTL can never extend or
// drop a lease someone else took. Valid reports, by the local monotonic clock,
// whether the lease can still be trusted; the active side checks it before
// every unit of work. A Lease is used by one goroutine (its Elector). Read
// reports who holds a lease key, for those who watch without contending;
// it is safe for concurrent use.
package lease
