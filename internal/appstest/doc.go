// Package appstest lays out apps files as Kubernetes delivers them, for
// the tests of live reloads.
package appstest
