package webhook

import "github.com/headcount/headcount/pkg/keyspace"

// leaseKey is the lease of one webhook group (URL) of app: its holder
// delivers that group. It shares the app's hash tag; only this file names
// it. The app's event log is eventlog.Key.
func leaseKey(ks keyspace.Space, app, group string) string {
	return ks.App(app) + "webhook-lease:" + group
}
