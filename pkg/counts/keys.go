package counts

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/luascript"
	"github.com/headcount/headcount/pkg/protocol"
)

// Every key of one app carries {app} as its hash tag, so each script's keys
// share a slot and run unchanged on Redis Cluster. This file is the only
// place that spells them; keys puts them under the deployment's prefix.
type keys struct {
	ks keyspace.Space
	// seen remembers the reaps each app's last read found under way (see
	// runExact); nil in the keys built for one name.
	seen *reapsSeen
}

// appPrefix starts every key of one app; the scripts derive the per-channel
// presence keys from it (see scripts/lib.lua) and check each against the
// keys they were given, so it is passed to them.
func (k keys) appPrefix(app string) string { return k.ks.App(app) }

func (k keys) nodesKey(app string) string       { return k.appPrefix(app) + "nodes" }
func (k keys) globalKey(app string) string      { return k.appPrefix(app) + "channels" }
func (k keys) nodeKey(app, node string) string  { return k.appPrefix(app) + "node:" + node }
func (k keys) membersKey(app, ch string) string { return k.appPrefix(app) + "members:" + ch }
func (k keys) infoKey(app, ch string) string    { return k.appPrefix(app) + "info:" + ch }
func (k keys) connsKey(app string) string       { return k.appPrefix(app) + "conns" }

// versionKey holds the version of the app's last count change (see
// next_version in scripts/lib.lua), which orders subscription counts
// announced by different processes.
func (k keys) versionKey(app string) string { return k.appPrefix(app) + "seq" }

// A node's contribution being reaped lives under reapingKey(app, id) from
// the reap's first unit until its last slice (see reap.lua): id is
// "<nonce>:<node>", nonce random (see newReapID; a retire's starts with
// retirePrefix), so each reap has a key of
// its own that no republish of the node writes, and no counter key outlives
// the app. reapsKey is the set of those
// ids: reaps under way, which audits count as contributions and a cleaner
// finishes if the one that started them stopped.
func (k keys) reapingKey(app, id string) string { return k.appPrefix(app) + "reaping:" + id }
func (k keys) reapsKey(app string) string       { return k.appPrefix(app) + "reaps" }

// epochsKey maps each registered node of app to the token of its current
// contribution (its epoch): a republish sets a fresh one as it retires the
// old contribution, and apply.lua refuses a unit sent under another, so a
// unit that timed out in the client but ran late cannot land on what the
// node republished since. A reap and a graceful removal delete the node's
// field with its registration, so the hash holds registered nodes only.
func (k keys) epochsKey(app string) string { return k.appPrefix(app) + "epochs" }

// completeKey holds the time (unix ms, by the app's shard's clock) from
// which this Redis holds every live node's contribution to app. It has no
// TTL and nothing deletes it, so it exists only while Redis's data is
// intact; the admission gate (CompleteKey) seats no newcomer before it
// exists and that time has come. Nodes set it as they register (reap.lua,
// retiring): the first registration of a fresh Redis to now, and one of a
// node that finds its contribution gone (Redis lost its data, or reaped
// it while alive) to a settle time ahead, by which every live node has
// found the same within a heartbeat and republished.
func (k keys) completeKey(app string) string { return k.appPrefix(app) + "complete" }

// Fields of a node's contribution hash. A channel name cannot hold "\n",
// so the first one separates it from the user id.
func channelField(ch string) string      { return "c:" + ch }
func memberField(ch, user string) string { return "m:" + ch + "\n" + user }

const connectionsField = "n"

// auditKeys are the first keys audit.lua and repair.lua declare; the node,
// member and connection keys they read follow (see Store.audit and
// repairOne), and the scripts check every name they derive from
// appPrefix(app) against them.
func (k keys) auditKeys(app string) []string { return []string{k.nodesKey(app), k.globalKey(app)} }

// contributionKeys are the contribution hashes the global counts of app
// include: those of nodes (registered) and of reaps (under way; see
// reapingKey), after the set of reaps; audit.lua and repair.lua declare
// them.
func (k keys) contributionKeys(app string, nodes, reaps []string) []string {
	out := make([]string, 0, len(nodes)+len(reaps)+1)
	for _, id := range nodes {
		out = append(out, k.nodeKey(app, id))
	}
	out = append(out, k.reapsKey(app))
	for _, id := range reaps {
		out = append(out, k.reapingKey(app, id))
	}
	return out
}

// membersKeyPrefix starts the name of every presence member hash of app,
// and membersKeyChannel is the channel of one such key.
func (k keys) membersKeyPrefix(app string) string { return k.membersKey(app, "") }

func (k keys) membersKeyChannel(app, key string) (string, bool) {
	return strings.CutPrefix(key, k.membersKeyPrefix(app))
}

// appsKey indexes the apps that have had counts, so the cleaner finds every
// app's nodes even when its apps file differs from the wsnodes'.
func (k keys) appsKey() string { return k.ks.Name("apps") }

// scriptKeys are the keys of apply.lua: the node's registry,
// contribution and the global counts, with logEvents the app's event log
// (the scripts then append their edges to it; see logArgs), then the
// connection count and the members and info hashes of every presence
// channel among fields, and last the nodes' epochs. Declaring every key
// keeps a script whole during a Cluster slot migration (see lib.lua); a
// script that meets a field not declared here writes nothing and names it,
// and the caller retries with it.
func (k keys) scriptKeys(app, node string, logEvents bool, fields ...string) []string {
	keys := []string{k.nodesKey(app), k.nodeKey(app, node), k.globalKey(app)}
	keys = append(k.logKeys(keys, app, logEvents), k.fieldKeys(app, fields...)...)
	return append(keys, k.epochsKey(app))
}

// logKeys appends to keys, if logEvents, the app's event log and its index
// (KEYS[4] and KEYS[5] of apply.lua and reap_slice.lua, see scripts/lib.lua).
func (k keys) logKeys(keys []string, app string, logEvents bool) []string {
	if logEvents {
		keys = append(keys, eventlog.Key(k.ks, app), eventlog.IndexKey(k.ks, app))
	}
	return keys
}

// unitArgs are the first ARGVs of apply.lua and reap_slice.lua, the same
// in both (scripts/lib.lua reads them): the app's key prefix, what the
// unit logs to the event log (spec's Arg, "" for nothing), which channels'
// edges are never logged: the server's internal ones
// (protocol.Kind.Logged), and whose counts are not: presence channels
// (protocol.Kind.AnnouncesCounts); each by the prefix of its kind.
func (k keys) unitArgs(app string, spec eventlog.Spec) []any {
	return []any{k.appPrefix(app), spec.Arg(), protocol.InternalPrefix, protocol.PresencePrefix}
}

// fieldKeys are the keys contribution fields touch beside the global
// counts: the connection count, the version of the counts, and the members
// and info hashes of each presence channel among fields.
func (k keys) fieldKeys(app string, fields ...string) []string {
	keys := []string{k.connsKey(app), k.versionKey(app)}
	seen := map[string]bool{}
	for _, f := range fields {
		rest, ok := strings.CutPrefix(f, "m:")
		if !ok {
			continue
		}
		ch, _, _ := strings.Cut(rest, "\n")
		if !seen[ch] {
			seen[ch] = true
			keys = append(keys, k.membersKey(app, ch), k.infoKey(app, ch))
		}
	}
	return keys
}

// The statuses the count scripts answer with, first in their reply, each
// distinct. The scripts read them under the names the status and exact
// preludes declare (scripts.go), so each is defined once, here.
const (
	// statusApplied (apply.lua): the unit was applied.
	statusApplied = 1
	// statusUnregistered (apply.lua): the node is not registered, or not
	// under the unit's epoch (reaped while alive, Redis lost it, or the
	// unit is older than the node's last republish). Nothing was written:
	// the caller must replace.
	statusUnregistered = -1
	// statusNegative (apply.lua): a delta would take a count below zero.
	// Nothing was written: the caller must replace.
	statusNegative = -2
	// statusUndeclared (apply.lua, reap_slice.lua, audit.lua, repair.lua):
	// fields whose keys the call did not declare. Nothing was written: the
	// caller retries declaring them.
	statusUndeclared = -3
	// statusReaps (every read of counts, exactlib.lua): the reaps under
	// way are not those the call declared; retry declaring the ids that
	// follow it (exact.go).
	statusReaps = -4
	// statusSpared (reap.lua): nothing was reaped: the node is not
	// registered, or was seen within dead-after.
	statusSpared = -5
	// statusExpired (page.lua): the walk's snapshot expired.
	statusExpired = -6
)

// loadScripts loads every script on every master, so EVALSHA in pipelines
// finds them (after a Redis restart too).
func loadScripts(ctx context.Context, rdb redis.UniversalClient) error {
	for _, s := range []*luascript.Script{applyScript, reapScript, staleScript} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return err
		}
	}
	return nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Liveness channels (see liveness.go) and the node-level liveness keys
// beside them share the {liveness} tag: one slot, the shard the cleaner
// checks subscriptions on. Nothing is ever published on the channels.
func (k keys) livenessTag() string { return k.ks.Tagged("liveness") }

// nodeLivenessChannel is the channel a node holds a subscription to;
// canaryChannel a cleaner's own (see NewCanary).
func (k keys) nodeLivenessChannel(node string) string { return k.livenessTag() + "node:" + node }
func (k keys) canaryChannel(id string) string         { return k.livenessTag() + "cleaner:" + id }

// livenessKeys are the node-level liveness keys: seen, a sorted set of
// node -> its last write (unix ms by the liveness shard's clock), written
// by the node's recorder with every flush as a command of its own, so the
// per-app units stay single-slot; and subscribed, node -> the last such
// write made while the node's liveness subscription was confirmed. The
// cleaner finds the nodes to check there in one read, whatever the number
// of apps (see Store.LivenessCandidates), and entries older than
// dead-after are dropped. addr, node -> the host:port its admin port
// serves GET /liveness on, is written with seen and read by the cleaner's
// watch (Store.WatchNodes), which drops the fields of nodes gone from seen.
func (k keys) livenessKeys() []string {
	return []string{k.livenessTag() + "seen", k.livenessTag() + "subscribed", k.livenessTag() + "addr"}
}

// Keys of the listing read side (paging.go, shared_listing.go). Caches, locks and snapshots
// are the only keys with a TTL: losing one costs a recomputation, never a
// wrong count.
//
// listingKey caches one encoded full listing (variant: a hash of its
// parameters); listingLockKey is the single-flight lock of its computation.
func (k keys) listingKey(app, variant string) string { return k.appPrefix(app) + "listing:" + variant }
func (k keys) listingLockKey(app, variant string) string {
	return k.appPrefix(app) + "listing-lock:" + variant
}

// snapshotKey holds one paging walk's frozen, lexicographically ordered
// channel names (every score 0); snapshotCurrentKey names the snapshot new
// walks of the app reuse while it is young.
func (k keys) snapshotKey(app, id string) string    { return k.appPrefix(app) + "snap:" + id }
func (k keys) snapshotCurrentKey(app string) string { return k.appPrefix(app) + "snap-current" }

// snapshotBuildKey holds a snapshot while it is copied, so no walk reads a
// partial one (see Listings.snapshot).
func (k keys) snapshotBuildKey(app, id string) string {
	return k.appPrefix(app) + "snap-building:" + id
}

// snapshotLockKey is held by the one caller copying a snapshot of app.
func (k keys) snapshotLockKey(app string) string { return k.appPrefix(app) + "snap-lock" }

// ChannelsKey names, in ks, app's global channel counts (a sorted set
// channel -> subscriptions cluster-wide). It is exported, as MembersKey is,
// for the scripts of packages that must read counts inside their own atomic
// unit (the event log's claims); only counts writes it.
func ChannelsKey(ks keyspace.Space, app string) string { return keys{ks: ks}.globalKey(app) }

// CompleteKey names, in ks, the time from which app's counts hold every
// live node's contribution (see completeKey). It is exported for the
// admission gate's scripts, which read it; only counts writes it.
func CompleteKey(ks keyspace.Space, app string) string { return keys{ks: ks}.completeKey(app) }

// MembersKey names, in ks, the hash of a presence channel's members (user
// id -> their sockets cluster-wide). It is exported for the scripts of
// packages that must read membership inside their own atomic unit
// (admission's gate); it shares the app's hash tag, so such a script stays
// single-slot. Only counts writes it.
func MembersKey(ks keyspace.Space, app, channel string) string {
	return keys{ks: ks}.membersKey(app, channel)
}
