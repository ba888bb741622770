package cache

import "github.com/headcount/headcount/pkg/keyspace"

// keys names the cache's Redis keys; this file is the only place that
// spells them. Both carry the app's hash tag, so the read script's two
// keys share a slot, and so does the publish pipeline that writes one
// beside the event's pub/sub topic.
type keys struct{ ks keyspace.Space }

// entry holds a cache channel's last event: "<prefix>:{<app>}:cache:<channel>".
func (k keys) entry(app, channel string) string { return k.ks.App(app) + "cache:" + channel }

// missed marks a miss already reported to the app's cache_miss webhook:
// "<prefix>:{<app>}:cache-miss:<channel>".
func (k keys) missed(app, channel string) string { return k.ks.App(app) + "cache-miss:" + channel }
