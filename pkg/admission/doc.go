// Package admission is the gate of presence channels: it never lets one
// user too many in. Every presence channel seats its member limit
// (maxPresenceMembersPerChannel), first come first served; a
// capacity-limited one seats its capacity, or the member limit if smaller,
// through a fair FIFO waiting list. scripts/lib.lua's seats is the one rule
// of a channel's seats, and its header says what Redis holds per channel
// (the presence member hash is read from counts in the same scripts).
//
// Guarantees:
//
//   - Every operation is one Lua script over one slot, timed by Redis's
//     clock: any number of httpapi replicas and wsnodes share one gate, and
//     an admission check costs one round trip. A script's work grows with
//     the channel's seats and the waiters it strikes or admits, never with
//     the app.
//   - Occupancy counts distinct users holding a seat: presence members
//     (read as counts reads them: a user whose sockets are all on nodes
//     being reaped is none, from the reap's first unit on), holders of an
//     unexpired slot (a ticket not used yet, a leaver within
//     the grace) and holds. Nobody is admitted while occupancy is at
//     the seats, so under any concurrency, in any order of checks,
//     subscribes, flushes, leaves, DELETEs, expiries and capacity changes,
//     the admitted users never exceed it. (Lowering a capacity evicts
//     nobody: nobody is admitted until occupancy is below the new one.
//     Members who joined before a limit was set count.)
//   - The gate and the membership are one truth. A subscribe the gate lets
//     in (Join) holds the seat for the grace, which the node's recording of
//     the member (its counts flush, milliseconds later) lands within: until
//     then the new member exists only in the gate, and nothing may free the
//     seat under them. So the member's arrival never adds a user the gate
//     did not count. The hold is also taken for a user who is a member
//     already (their other sockets, on another node, may leave first). A
//     node stalled past the grace between the two is as good as dead: like
//     a reaped node that comes back, it can overfill the channel.
//   - Redis losing its data loses no seat: while the members may not hold
//     every live node's (counts.CompleteKey: absent, or ahead of now while
//     the nodes republish), Join seats only members and held users (others
//     get an IncompleteError and retry), Check admits nobody new and
//     nobody is promoted. Check is the one exception: with the key absent
//     (no node wrote since the loss, or ever) it cannot tell an empty
//     Redis from a fresh one, and admits as on an empty channel.
//   - DELETE (Leave) takes the user off the list and gives up their slot:
//     an unused ticket, a leaver's grace, or a member's claim to one. It
//     takes no seat from a user in the channel: a member holds theirs until
//     their last socket leaves (then without a grace), and a subscribe
//     being recorded until its hold ends. Occupancy never drops below the
//     users really there.
//   - Waiters are admitted strictly from the head of the list, before any
//     newcomer: a newcomer is admitted directly only when the list is empty.
//   - A channel with the member limit alone keeps no list and gives no
//     tickets: Join lets a user in while a seat is free and refuses them
//     (ErrFull) when none is; Check answers Unlimited, State capacity 0. A
//     seat held by a subscribe whose member leaves within the grace stays
//     taken until the grace from that subscribe ends. Every join writes a
//     hold, so the hold key expires a grace after its last hold ends.
//   - No held places: a waiter not checking in for the dropout time is
//     struck; a ticket not used within its time is freed; a member's slot
//     lasts while they are a member and for the grace after their last
//     socket left (Left), then goes to the head of the list; a subscribe
//     never recorded (its socket left within the node's flush window, or
//     the node died) frees its seat when its hold ends. If the leave is
//     never reported, the slot is freed at its expiry, never kept.
//   - A capacity is at most apps.MaxCapacity, which the scripts' Lua numbers
//     and Redis's integer replies both hold exactly: PUT .../capacity and
//     the apps file refuse more, and an override above it (written before
//     there was a maximum) counts as the maximum.
//   - Time-based changes take effect at the next operation on the channel
//     (any check, check-in, GET or leave), which wsnodes run periodically
//     while waiters are connected.
package admission
