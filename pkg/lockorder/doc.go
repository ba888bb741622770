// Package lockorder gives mutexes a rank, so that tests can check a
// package's written lock order. Mutex and RWMutex take the rank as a type
// parameter (a zero-size type with a Rank method), so the rank costs no
// byte and a Mutex is exactly the size of a sync.Mutex in every build.
//
// Guarantees:
//   - Without the build tag lockorder, Mutex and RWMutex are sync.Mutex
//     and sync.RWMutex embedded: their methods are the sync ones, with no
//     check and no cost.
//   - With -tags lockorder, each goroutine's held ranks are recorded, and
//     taking a lock whose rank is not above every rank the goroutine
//     holds panics before it blocks, naming both locks: an inversion is
//     reported where it happens, on any run that takes the two in the
//     wrong order, not only on the rare run that deadlocks. Two locks of
//     one rank are never held together (a Leaf may hold nothing under it).
//   - A lock released on another goroutine than the one that took it
//     panics too under the tag: the per-goroutine record would be wrong.
package lockorder
