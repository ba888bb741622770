package counts

import (
	"context"
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every key of one app carries {app} as its hash tag, so each script's keys
// share a slot and run unchanged on Redis Cluster. This file is the only
// place that spells them.
const prefix = "hc:"

// appPrefix starts every key of one app; the scripts derive the per-channel
// presence keys from it (see scripts/lib.lua), so it is passed to them.
func appPrefix(app string) string { return prefix + "{" + app + "}:" }

func nodesKey(app string) string       { return appPrefix(app) + "nodes" }
func globalKey(app string) string      { return appPrefix(app) + "channels" }
func nodeKey(app, node string) string  { return appPrefix(app) + "node:" + node }
func membersKey(app, ch string) string { return appPrefix(app) + "members:" + ch }
func infoKey(app, ch string) string    { return appPrefix(app) + "info:" + ch }
func connsKey(app string) string       { return appPrefix(app) + "conns" }

// Fields of a node's contribution hash. A channel name cannot hold "\n",
// so the first one separates it from the user id.
func channelField(ch string) string      { return "c:" + ch }
func memberField(ch, user string) string { return "m:" + ch + "\n" + user }

const connectionsField = "n"

// auditKeys are the keys audit.lua and repair.lua declare; they derive the
// rest from appPrefix(app).
func auditKeys(app string) []string { return []string{nodesKey(app), globalKey(app)} }

// membersKeyPattern is a SCAN MATCH pattern for every presence member hash
// of app, and membersKeyChannel the channel of one such key. The app id is
// escaped: it is matched literally, whatever glob characters it holds.
func membersKeyPattern(app string) string { return globEscape(membersKey(app, "")) + "*" }

func membersKeyChannel(app, key string) (string, bool) {
	return strings.CutPrefix(key, membersKey(app, ""))
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// appsKey indexes the apps that have had counts, so the cleaner finds every
// app's nodes even when its apps file differs from the wsnodes'.
const appsKey = prefix + "apps"

// scriptKeys are the keys of apply.lua and reap.lua: the node's registry,
// contribution and the global counts, the connection count, the members
// and info hashes of every presence channel among fields, and, with
// logEvents, the app's event log (the scripts then append their edges to
// it). Declaring every key keeps a script whole during a Cluster slot
// migration (see lib.lua); a script that meets a field not declared here
// writes nothing and names it, and the caller retries with it.
func scriptKeys(app, node string, logEvents bool, fields ...string) []string {
	keys := []string{nodesKey(app), nodeKey(app, node), globalKey(app)}
	if logEvents {
		keys = append(keys, EventLogKey(app))
	}
	return append(keys, fieldKeys(app, fields...)...)
}

// fieldKeys are the keys contribution fields touch beside the global
// counts: the connection count, and the members and info hashes of each
// presence channel among fields.
func fieldKeys(app string, fields ...string) []string {
	keys := []string{connsKey(app)}
	seen := map[string]bool{}
	for _, f := range fields {
		rest, ok := strings.CutPrefix(f, "m:")
		if !ok {
			continue
		}
		ch, _, _ := strings.Cut(rest, "\n")
		if !seen[ch] {
			seen[ch] = true
			keys = append(keys, membersKey(app, ch), infoKey(app, ch))
		}
	}
	return keys
}

// EventLogKey names the app's event log: a stream of occupancy events
// (channel_occupied/_vacated, member_added/_removed) that the count scripts
// append in the same unit as the change, and other producers (client
// events, subscription counts, admission) append to with AppendEvents. Its
// entries have fields "t" (unix ms, Redis's clock), "ev" (the event as
// JSON) and "o" (the entry's byte offset, see scripts/eventlog.lua). The
// webhook package reads and trims it; it shares the app's hash tag.
func EventLogKey(app string) string { return appPrefix(app) + "events" }

var (
	//go:embed scripts/eventlog.lua
	eventlogSrc string
	//go:embed scripts/append.lua
	appendSrc string
	//go:embed scripts/logbytes.lua
	logBytesSrc string
	//go:embed scripts/lib.lua
	libSrc string
	//go:embed scripts/apply.lua
	applySrc string
	//go:embed scripts/reap.lua
	reapSrc string
	//go:embed scripts/stale.lua
	staleSrc string
	//go:embed scripts/audit.lua
	auditSrc string
	//go:embed scripts/repair.lua
	repairSrc string
	//go:embed scripts/nodeseen.lua
	nodeSeenSrc string
	//go:embed scripts/candidates.lua
	candidatesSrc string
	//go:embed scripts/forget.lua
	forgetSrc string

	applyScript = redis.NewScript(eventlogSrc + libSrc + applySrc)
	reapScript  = redis.NewScript(eventlogSrc + libSrc + reapSrc)
	staleScript = redis.NewScript(staleSrc)
	// The event log's scripts are run with Run, never in a pipeline.
	appendScript   = redis.NewScript(eventlogSrc + appendSrc)
	logBytesScript = redis.NewScript(eventlogSrc + logBytesSrc)
	// The audit's scripts are run with Run (EVALSHA, EVAL on NOSCRIPT), never
	// in a pipeline, so loadScripts need not load them.
	auditScript  = redis.NewScript(auditSrc)
	repairScript = redis.NewScript(repairSrc)
	// The node-level liveness scripts: nodeSeen runs with EVAL in the
	// recorder's pipeline (it is short, and EVAL never meets NOSCRIPT, so a
	// fresh liveness shard cannot fail a flush), the others with Run.
	nodeSeenScript   = redis.NewScript(nodeSeenSrc)
	candidatesScript = redis.NewScript(candidatesSrc)
	forgetScript     = redis.NewScript(forgetSrc)
)

// loadScripts loads every script on every master, so EVALSHA in pipelines
// finds them (after a Redis restart too).
func loadScripts(ctx context.Context, rdb redis.UniversalClient) error {
	for _, s := range []*redis.Script{applyScript, reapScript, staleScript} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return err
		}
	}
	return nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Node-level liveness keys, beside the liveness channels under the
// {liveness} tag (one slot, the shard the cleaner checks subscriptions on):
// livenessSeenKey is a sorted set of node -> its last write (unix ms by
// that shard's clock), written by the node's recorder with every flush as a
// command of its own, so the per-app units stay single-slot;
// livenessSubscribedKey holds node -> the last such write made while the
// node's liveness subscription was confirmed. The cleaner finds the nodes
// to check there in one read, whatever the number of apps (see
// Store.LivenessCandidates), and entries older than dead-after are dropped.
const (
	livenessSeenKey       = livenessTag + "seen"
	livenessSubscribedKey = livenessTag + "subscribed"
)

func livenessKeys() []string { return []string{livenessSeenKey, livenessSubscribedKey} }

// Keys of the listing read side (listing.go). Caches, locks and snapshots
// are the only keys with a TTL: losing one costs a recomputation, never a
// wrong count.
//
// listingKey caches one encoded full listing (variant: a hash of its
// parameters); listingLockKey is the single-flight lock of its computation.
func listingKey(app, variant string) string     { return appPrefix(app) + "listing:" + variant }
func listingLockKey(app, variant string) string { return appPrefix(app) + "listing-lock:" + variant }

// snapshotKey holds one paging walk's frozen, lexicographically ordered
// channel names (every score 0); snapshotCurrentKey names the snapshot new
// walks of the app reuse while it is young.
func snapshotKey(app, id string) string    { return snapshotKeyPrefix(app) + id }
func snapshotKeyPrefix(app string) string  { return appPrefix(app) + "snap:" }
func snapshotCurrentKey(app string) string { return appPrefix(app) + "snap-current" }

// MembersKey names the hash of a presence channel's members (user id ->
// their sockets cluster-wide). It is exported for the scripts of packages
// that must read membership inside their own atomic unit (admission's gate);
// it shares the app's hash tag, so such a script stays single-slot. Only
// counts writes it.
func MembersKey(app, channel string) string { return membersKey(app, channel) }
