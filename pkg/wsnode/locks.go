package wsnode

import "github.com/headcount/headcount/pkg/lockorder"

// The lock order. A goroutine takes locks only in increasing rank, and
// takes nothing under a leaf; each mutex's type carries its rank
// (lockorder.Mutex), so the order is checked wherever the mutex is used
// in a build with -tags lockorder (make test runs TestLockOrder so).
//
//  1. chanShard.mu (index.go, a read lock to deliver): a channel's local
//     subscribers. index.each holds it while its callback queues frames
//     (socket.mu, sender.mu, listed.mu) and, for a socket that is cut or
//     terminated meanwhile, closes it through its link (loopLink.mu).
//     Never two shards at once.
//  2. watchlist.mu (watchlist.go): a socket's watchlist statuses, held
//     while its frame is queued (socket.mu, sender.mu, and loopLink.mu
//     for a slow consumer); taken under chanShard.mu by watchEdge.
//  3. loopLink.mu (loop_linux.go): the event-loop link's inbox, flags and
//     close state, held while writing to or pausing its evloop.Conn
//     (evloop's Conn.mu, and its loop's mu when a write fails).
//  4. Leaves, under which nothing is taken: socket.mu (the send queue),
//     sender.mu (the ready list, and its cond), listed.mu, hub.mu and the
//     hub's shard.mu, waiters.mu, appChannels.mu, channelView.mu,
//     resumers.mu (replay.go), and evloop's Conn.mu and loop.mu. evloop
//     calls a handler (OnData, OnDrained, OnClose) only with none of its
//     locks held.
//
// Outside the order: socketConn.mu (sockread.go), the goroutine
// transport's write side, is a leaf too, but tryFrame hands it locked to
// the socket's finish goroutine, which the per-goroutine check cannot
// follow; it is taken with no other lock held. The ...Locked methods
// (pauseLocked, resumeLocked, evloop's setEventsLocked, closeLocked) run
// with their owner's lock held and take none themselves.

// rankIndex is chanShard.mu's rank (1 above).
type rankIndex struct{}

func (rankIndex) Rank() lockorder.Rank { return lockorder.Rank{N: 1, Name: "wsnode chanShard.mu"} }

// rankWatchlist is watchlist.mu's rank (2 above).
type rankWatchlist struct{}

func (rankWatchlist) Rank() lockorder.Rank { return lockorder.Rank{N: 2, Name: "wsnode watchlist.mu"} }

// rankLink is loopLink.mu's rank (3 above).
type rankLink struct{}

func (rankLink) Rank() lockorder.Rank { return lockorder.Rank{N: 3, Name: "wsnode loopLink.mu"} }
