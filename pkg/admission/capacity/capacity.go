// Package capacity holds the bound of an admission capacity. Package
// admission's scripts rely on it; package apps refuses an apps file above
// it, and the HTTP API a PUT .../capacity. It is a package of its own so
// that apps, which config imports, need not import admission's Redis code.
// It holds constants only.
package capacity

// Max is the largest capacity a channel may have. The admission scripts
// compute in Lua numbers, doubles exact up to 2^53 only, and Redis turns
// the numbers they return into 64-bit integers: 9223372036854775807 came
// back negative and the channel left the listing. A billion is far inside
// both, and far above the users one presence channel could hold (its
// members are one hash in Redis), so no real limit is refused.
const Max = 1_000_000_000
