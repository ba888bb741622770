// Package admission is the gate of capacity-limited presence channels: a
// fair FIFO waiting list that never lets one user too many in.
//
// Per channel, Redis holds the capacity override, the slots (admitted users
// with an expiry), the waiting list (users by arrival sequence) and each
// waiter's last check-in, all under the app's hash tag; the presence member
// hash is read from counts in the same scripts. Guarantees:
//
//   - Every operation is one Lua script over one slot, timed by Redis's
//     clock: any number of httpapi replicas and wsnodes share one gate, and
//     an admission check costs one round trip.
//   - Occupancy counts distinct users: presence members, holders of an
//     unexpired slot (a ticket not used yet, a leaver within the grace).
//     Nobody is admitted while occupancy is at capacity, so under any
//     concurrency the admitted users never exceed it. (Lowering a capacity
//     evicts nobody; members who joined before a limit was set count.)
//   - Waiters are admitted strictly from the head of the list, before any
//     newcomer: a newcomer is admitted directly only when the list is empty.
//   - No held places: a waiter not checking in for the dropout time is
//     struck; a ticket not used within its time is freed; a member's slot
//     lasts while they are a member and for the grace after their last
//     socket left (Left), then goes to the head of the list. If the leave is
//     never reported, the slot is freed at its expiry, never kept.
//   - Time-based changes take effect at the next operation on the channel
//     (any check, check-in, GET or leave), which wsnodes run periodically
//     while waiters are connected.
package admission
