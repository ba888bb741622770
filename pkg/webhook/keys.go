package webhook

import "github.com/headcount/headcount/pkg/redisx"

// leaseKey is the lease of one webhook group (URL) of app: its holder
// delivers that group. It shares the app's hash tag; only this file names
// it. The app's event log is eventlog.Key.
func leaseKey(ks redisx.Keyspace, app, group string) string {
	return ks.App(app) + "webhook-lease:" + group
}
